"""The object store interface: a flat namespace of immutable byte objects.

Keys are ``/``-separated relative paths (``blobs/ab/ab12...``). A backend
implements the five byte-level operations; the file helpers and the
content-addressed helpers are derived and may be overridden for speed.

    store = get_object_store(settings)
    key = await store.put_blob(b"hello")           # blobs/2c/2cf2...
    data = await store.get_verified(key, sha256)   # IntegrityError if it changed
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import ClassVar

from onebox.errors import IntegrityError, NotFound, ValidationError

BLOB_PREFIX = "blobs/"
MANIFEST_PREFIX = "manifests/"
_KEY_RE = re.compile(r"^[A-Za-z0-9._\-]+(/[A-Za-z0-9._\-]+)*$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
CHUNK_BYTES = 1 << 20


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative object key, else raise ValidationError."""
    if not _KEY_RE.match(key) or any(part in (".", "..") for part in key.split("/")):
        raise ValidationError(
            f"invalid object key {key!r}: use '/'-separated names of letters, digits, '._-'",
            field="key",
        )
    return key


def check_sha256(digest: str) -> str:
    if not _SHA_RE.match(digest):
        raise ValidationError(f"not a sha256 hex digest: {digest!r}", field="sha256")
    return digest


def blob_key(sha256: str) -> str:
    """The key of the content-addressed blob with this sha256."""
    check_sha256(sha256)
    return f"{BLOB_PREFIX}{sha256[:2]}/{sha256}"


def manifest_key(sha256: str) -> str:
    """The key of the snapshot manifest whose canonical bytes hash to ``sha256``."""
    check_sha256(sha256)
    return f"{MANIFEST_PREFIX}{sha256}.json"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def corrupted(key: str, expected: str, actual: str) -> IntegrityError:
    return IntegrityError(
        f"object {key} is corrupted: expected sha256 {expected}, got {actual}. "
        "Fix: re-upload it from a good copy, or delete the snapshots that reference it."
    )


class ObjectStore(abc.ABC):
    """Immutable objects by key. ``get`` of a missing key raises NotFound."""

    scheme: ClassVar[str] = ""

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (readers never see a partial object)."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """The bytes stored under ``key``; NotFound if there are none."""

    @abc.abstractmethod
    async def exists(self, key: str) -> bool:
        """Whether an object is stored under ``key``."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove ``key``; deleting a missing key is not an error."""

    @abc.abstractmethod
    async def list(self, prefix: str = "") -> list[str]:
        """Every key starting with ``prefix``, sorted."""

    def describe(self) -> str:
        """Where the objects live, for messages (no secrets)."""
        return self.scheme

    async def close(self) -> None:
        """Release connections. Idempotent."""
        return None

    async def iter_chunks(self, key: str, chunk_bytes: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
        """The object's bytes in pieces of at most ``chunk_bytes``, in order; NotFound if
        missing. Backends read incrementally (memory stays at one chunk); this fallback
        reads the whole object first."""
        data = await self.get(key)
        for start in range(0, len(data), chunk_bytes):
            yield data[start:start + chunk_bytes]

    async def put_file(self, key: str, path: Path) -> None:
        """Store the content of a local file."""
        await self.put(key, await asyncio.to_thread(path.read_bytes))

    async def get_file(self, key: str, path: Path) -> None:
        """Write the object to a local file (created or truncated)."""
        data = await self.get(key)
        await asyncio.to_thread(path.write_bytes, data)

    async def missing(self, keys: Iterable[str]) -> set[str]:
        """The subset of ``keys`` not stored (checked concurrently; backends may batch)."""
        wanted = sorted(set(keys))
        gate = asyncio.Semaphore(16)

        async def absent(key: str) -> bool:
            async with gate:
                return not await self.exists(key)

        found = await asyncio.gather(*(absent(key) for key in wanted))
        return {key for key, gone in zip(wanted, found, strict=True) if gone}

    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` content-addressed, once; return its key."""
        key = blob_key(hashlib.sha256(data).hexdigest())
        if not await self.exists(key):
            await self.put(key, data)
        return key

    async def get_verified(self, key: str, sha256: str) -> bytes:
        """The object's bytes, after checking they hash to ``sha256`` (else IntegrityError)."""
        data = await self.get(key)
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise corrupted(key, sha256, actual)
        return data

    async def get_file_verified(self, key: str, sha256: str, path: Path) -> None:
        """Download to ``path`` and check its sha256; the file is removed if it does not match."""
        await self.get_file(key, path)
        actual = await asyncio.to_thread(sha256_file, path)
        if actual != sha256:
            path.unlink(missing_ok=True)
            raise corrupted(key, sha256, actual)


def missing(store: ObjectStore, key: str) -> NotFound:
    return NotFound(f"object {key} not found in {store.describe()}")
