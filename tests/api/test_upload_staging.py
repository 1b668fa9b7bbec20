"""Uploads are streamed to a private directory on disk, bounded per tenant, refused past
the byte limit as they arrive.

A slow upload is held open mid-body: its bytes are already in a 0600 file of
``<home>/upload-staging/<random>`` (0700); the same tenant's next upload is answered 429 with
Retry-After (``api.max_concurrent_uploads_per_tenant``), another tenant's is served; when the
body ends the file lands in the workspace whole and the staging directory is emptied.
"""

from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from api_helpers import Api

MIB = 1 << 20
BOUNDARY = "onebox-test-boundary"


def _staged_files(home: Path) -> list[Path]:
    root = home / "upload-staging"
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


async def _held_form(gate: asyncio.Event, first: bytes, rest: bytes) -> AsyncIterator[bytes]:
    """A multipart body with one 'file' part, held open after ``first`` until ``gate``."""
    yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\nin/big.bin\r\n"
           f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
           "filename=\"big.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
    yield first
    await gate.wait()
    yield rest
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


async def _until_staged(home: Path, size: int) -> Path:
    for _ in range(600):
        found = [p for p in _staged_files(home) if p.stat().st_size >= size]
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no staged file of {size} bytes under {home}/upload-staging")


async def test_uploads_stream_to_a_private_dir_with_a_per_tenant_share(
    api_no_worker: Api,
) -> None:
    home = api_no_worker.settings.home
    api_no_worker.settings.api.max_concurrent_uploads_per_tenant = 1
    first, rest = b"a" * (2 * MIB), b"b" * MIB
    gate = asyncio.Event()
    async with api_no_worker.client("acme") as acme, api_no_worker.client("globex") as globex:
        session = (await acme.post("/v1/sessions")).json()["id"]
        held = asyncio.create_task(acme.post(
            f"/v1/sessions/{session}/files", content=_held_form(gate, first, rest),
            headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}))
        staged = await _until_staged(home, len(first))
        assert stat.S_IMODE(staged.stat().st_mode) == 0o600
        assert stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(staged.parent.parent.stat().st_mode) == 0o700

        refused = await acme.post("/v1/uploads", files={"files": ("x.txt", b"x")})
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert "max_concurrent_uploads_per_tenant" in refused.json()["message"]
        served = await globex.post("/v1/uploads", files={"files": ("x.txt", b"x")})
        assert served.status_code == 201, served.text

        gate.set()
        done = await held
        assert done.status_code == 201, done.text
        assert done.json() == {"path": "in/big.bin", "size": len(first) + len(rest)}
        back = await acme.get(f"/v1/sessions/{session}/files/in/big.bin")
        assert back.content == first + rest
        again = await acme.post("/v1/uploads", files={"files": ("y.txt", b"yy")})
        assert again.status_code == 201, again.text
    assert _staged_files(home) == []


async def _chunks(total: int) -> AsyncIterator[bytes]:
    for _ in range(total // (256 << 10)):
        yield b"z" * (256 << 10)


async def test_an_upload_past_the_limit_is_refused_as_it_arrives(api_no_worker: Api) -> None:
    """A chunked body (no Content-Length to refuse up front) over api.max_upload_bytes."""
    api_no_worker.settings.api.max_upload_bytes = MIB
    key = api_no_worker.keys["acme"]
    async with httpx.AsyncClient(base_url=api_no_worker.url, timeout=60) as c:
        made = (await c.post("/e2b/v2/sandboxes", json={}, headers={"X-API-Key": key})).json()
        inside = {"E2b-Sandbox-Id": made["sandboxID"], "X-Access-Token": made["envdAccessToken"]}
        answer = await c.post("/e2b/sandbox/files", params={"path": "/home/user/big.bin"},
                              content=_chunks(3 * MIB), headers={
                                  **inside, "Content-Type": "application/octet-stream"})
        assert answer.status_code == 413, answer.text
        assert str(MIB) in answer.text and "MAX_UPLOAD_BYTES" in answer.text
        gone = await c.get("/e2b/sandbox/files", params={"path": "/home/user/big.bin"},
                           headers=inside)
        assert gone.status_code == 404
    assert _staged_files(api_no_worker.settings.home) == []


async def test_a_tenant_s_uploads_in_flight_are_bounded_in_bytes(api_no_worker: Api) -> None:
    """With room for several uploads at once, a tenant whose held uploads already stage
    api.max_upload_bytes_in_flight_per_tenant bytes is refused (429) as its next body passes
    it, through any upload route (the knowledge one too); another tenant still uploads, and
    the tenant's share is back once its uploads end."""
    home = api_no_worker.settings.home
    api_no_worker.settings.api.max_concurrent_uploads_per_tenant = 8
    api_no_worker.settings.api.max_upload_bytes_in_flight_per_tenant = 3 * MIB
    first, rest = b"a" * (2 * MIB), b"b" * 1024
    gate = asyncio.Event()
    async with api_no_worker.client("acme") as acme, api_no_worker.client("globex") as globex:
        session = (await acme.post("/v1/sessions")).json()["id"]
        held = asyncio.create_task(acme.post(
            f"/v1/sessions/{session}/files", content=_held_form(gate, first, rest),
            headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}))
        await _until_staged(home, len(first))
        big = ("notes.txt", b"word " * (MIB // 4))  # 1.25 MiB: 3.25 MiB in flight with the held
        refused = [await acme.post("/v1/uploads", files={"files": big}),
                   await acme.post("/v1/knowledge/upload", files={"file": big})]
        assert [r.status_code for r in refused] == [429, 429], [r.text for r in refused]
        assert all("max_upload_bytes_in_flight_per_tenant" in r.json()["message"]
                   for r in refused)
        small = await acme.post("/v1/uploads", files={"files": ("s.txt", b"s" * 1000)})
        assert small.status_code == 201, small.text  # under the share: still served
        served = await globex.post("/v1/uploads", files={"files": big})
        assert served.status_code == 201, served.text
        gate.set()
        assert (await held).status_code == 201
        again = await acme.post("/v1/knowledge/upload", files={"file": big},
                                data={"collection": "notes"})
        assert again.status_code == 201, again.text
    assert _staged_files(home) == []
