"""The ObjectStore contract, run against every backend: fs, and S3 on a real local S3 server.

The S3 server is moto's standalone server, started as a separate process on
127.0.0.1 by the ``s3_endpoint`` fixture; boto3 talks HTTP to it, nothing is patched.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from onebox.config import load_settings
from onebox.errors import ConfigError, IntegrityError, NotFound, StorageError, ValidationError
from onebox.objects import FsObjectStore, ObjectStore, blob_key, get_object_store
from onebox.objects.s3 import S3ObjectStore

CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server process on 127.0.0.1, for the whole test session."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/moto-api/", timeout=1)
            break
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"moto server did not start on {url}")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def make_bucket(endpoint: str) -> str:
    name = f"obx-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["fs", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    backend: ObjectStore
    if request.param == "fs":
        backend = FsObjectStore(tmp_path / "objects")
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        backend = S3ObjectStore(make_bucket(endpoint), "onebox/x", endpoint_url=endpoint,
                                **CREDENTIALS)
    yield backend
    await backend.close()


async def test_put_get_roundtrip_and_overwrite(store: ObjectStore) -> None:
    await store.put("a/b/c.bin", b"\x00\x01payload")
    assert await store.get("a/b/c.bin") == b"\x00\x01payload"
    await store.put("a/b/c.bin", b"second")
    assert await store.get("a/b/c.bin") == b"second"


async def test_missing_key_is_not_found_and_exists_is_false(store: ObjectStore) -> None:
    assert not await store.exists("nope/x")
    with pytest.raises(NotFound, match="nope/x"):
        await store.get("nope/x")
    await store.put("nope/x", b"")
    assert await store.exists("nope/x")
    assert await store.get("nope/x") == b""


async def test_missing_reports_the_keys_not_stored(store: ObjectStore) -> None:
    await store.put("m/here", b"1")
    assert await store.missing(["m/here", "m/gone", "m/gone"]) == {"m/gone"}
    assert await store.missing([]) == set()


async def test_delete_removes_and_is_idempotent(store: ObjectStore) -> None:
    await store.put("d/1", b"one")
    await store.delete("d/1")
    await store.delete("d/1")
    assert not await store.exists("d/1")


async def test_list_by_prefix_is_sorted(store: ObjectStore) -> None:
    for key in ("blobs/bb/2", "blobs/aa/1", "manifests/m.json", "blobsx"):
        await store.put(key, key.encode())
    assert await store.list("blobs/") == ["blobs/aa/1", "blobs/bb/2"]
    assert await store.list("blobs/a") == ["blobs/aa/1"]
    assert await store.list() == ["blobs/aa/1", "blobs/bb/2", "blobsx", "manifests/m.json"]


async def test_files_roundtrip(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 4000)
    await store.put_file("f/big", src)
    out = tmp_path / "out.bin"
    await store.get_file("f/big", out)
    assert out.read_bytes() == src.read_bytes()
    with pytest.raises(NotFound):
        await store.get_file("f/none", tmp_path / "none.bin")


async def test_blobs_are_content_addressed_and_verified(store: ObjectStore, tmp_path: Path) -> None:
    key = await store.put_blob(b"hello")
    digest = hashlib.sha256(b"hello").hexdigest()
    assert key == blob_key(digest) == f"blobs/{digest[:2]}/{digest}"
    assert await store.get_verified(key, digest) == b"hello"
    await store.put(key, b"tampered")
    with pytest.raises(IntegrityError, match=key):
        await store.get_verified(key, digest)
    with pytest.raises(IntegrityError, match=key):
        await store.get_file_verified(key, digest, tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("key", ["../etc/passwd", "/abs", "a//b", "a/./b", "", "a b"])
async def test_unsafe_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(ValidationError):
        await store.put(key, b"x")


async def test_concurrent_puts_of_one_blob_leave_one_good_object(store: ObjectStore) -> None:
    data = b"same bytes" * 1000
    keys = await asyncio.gather(*(store.put_blob(data) for _ in range(8)))
    assert len(set(keys)) == 1
    assert await store.get(keys[0]) == data
    assert await store.list("blobs/") == [keys[0]]


async def test_s3_unreachable_endpoint_is_a_storage_error() -> None:
    store = S3ObjectStore("b", endpoint_url=f"http://127.0.0.1:{_free_port()}", **CREDENTIALS)
    with pytest.raises(StorageError, match="127.0.0.1"):
        await store.get("k")


def test_registry_picks_backend_from_settings(tmp_path: Path, s3_endpoint: str) -> None:
    settings = load_settings(home=tmp_path)
    fs = get_object_store(settings)
    assert isinstance(fs, FsObjectStore) and fs.root == tmp_path / "objects"
    explicit = get_object_store(load_settings(home=tmp_path, objects="fs:///srv/objs"))
    assert isinstance(explicit, FsObjectStore) and explicit.root == Path("/srv/objs")
    s3 = get_object_store(
        load_settings(home=tmp_path, objects="s3://bkt/pre/fix", objects_endpoint_url=s3_endpoint)
    )
    assert isinstance(s3, S3ObjectStore)
    assert (s3.bucket, s3.prefix, s3.endpoint_url) == ("bkt", "pre/fix/", s3_endpoint)
    for bad in ("gcs://x", "s3://", "fs:relative"):
        with pytest.raises(ConfigError):
            get_object_store(load_settings(home=tmp_path, objects=bad))


async def test_snapshot_capture_and_restore_through_the_store(
    store: ObjectStore, tmp_path: Path
) -> None:
    from onebox.sandbox.snapshots import capture, restore, scan

    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub/a.txt").write_text("alpha")
    (ws / "b.bin").write_bytes(bytes(range(256)))
    info = await capture(store, ws)
    (ws / "b.bin").write_bytes(b"changed")
    again = await capture(store, ws)
    assert again.stored_bytes < info.stored_bytes
    await restore(store, info.sha256, tmp_path / "out")
    assert scan(tmp_path / "out").sha256 == info.sha256
    assert (tmp_path / "out/b.bin").read_bytes() == bytes(range(256))
    await store.put(blob_key(hashlib.sha256(b"alpha").hexdigest()), b"alphX")
    with pytest.raises(IntegrityError, match=blob_key(hashlib.sha256(b"alpha").hexdigest())):
        await restore(store, again.sha256, tmp_path / "out2")


async def test_iter_chunks_streams_the_object_in_order(store: ObjectStore) -> None:
    data = bytes(range(256)) * 4099  # not a multiple of the chunk size
    await store.put("big/one", data)
    chunks = [chunk async for chunk in store.iter_chunks("big/one", chunk_bytes=65536)]
    assert b"".join(chunks) == data
    assert max(len(c) for c in chunks) <= 65536 and len(chunks) == -(-len(data) // 65536)
    with pytest.raises(NotFound, match="big/none"):
        [chunk async for chunk in store.iter_chunks("big/none")]
