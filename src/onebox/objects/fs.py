"""The default object store: one file per object under a local directory.

Writes go to a temporary file in the target directory, are flushed to disk and
renamed into place, so a reader sees either the whole object or none. The store is private
to the process that runs onebox: its root and every directory under it are 0700, every
object 0600, so neither another local user nor a session's uid that escaped its sandbox can
read another tenant's stored files, whatever the modes of the home above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import BinaryIO, ClassVar

from onebox.errors import StorageError
from onebox.objects.base import CHUNK_BYTES, ObjectStore, check_key, corrupted, missing

TMP_PREFIX = ".tmp-"
DIR_MODE, FILE_MODE = 0o700, 0o600


class FsObjectStore(ObjectStore):
    """Objects as files under ``root`` (default ``$ONEBOX_HOME/objects``)."""

    scheme: ClassVar[str] = "fs"

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def describe(self) -> str:
        return f"fs:{self.root}"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._write, self._path(key), lambda fh: fh.write(data))

    async def put_file(self, key: str, path: Path) -> None:
        def copy(fh: BinaryIO) -> None:
            with path.open("rb") as src:
                shutil.copyfileobj(src, fh)

        await asyncio.to_thread(self._write, self._path(key), copy)

    def _write(self, target: Path, fill: Callable[[BinaryIO], object]) -> None:
        tmp = target.parent / f"{TMP_PREFIX}{uuid.uuid4().hex}"
        try:
            self._private_dirs(target.parent)
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                                   FILE_MODE), "wb") as fh:
                fill(fh)
                if self.fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"cannot write object {target}: {exc}") from exc

    def _private_dirs(self, directory: Path) -> None:
        """Create ``directory`` and the missing ones between it and the root, each 0700; a
        root left open by an older onebox is narrowed (it is the store's own)."""
        missing_dirs = [d for d in (directory, *directory.parents) if not d.exists()]
        for d in reversed(missing_dirs):
            with contextlib.suppress(FileExistsError):
                os.mkdir(d, DIR_MODE)
        st = self.root.stat()
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.chmod(self.root, DIR_MODE)

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError as exc:
            raise missing(self, key) from exc
        except OSError as exc:
            raise StorageError(f"cannot read object {key} at {path}: {exc}") from exc

    async def iter_chunks(self, key: str, chunk_bytes: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
        path = self._path(key)
        try:
            fh = await asyncio.to_thread(path.open, "rb")
        except FileNotFoundError as exc:
            raise missing(self, key) from exc
        except OSError as exc:
            raise StorageError(f"cannot read object {key} at {path}: {exc}") from exc
        try:
            while chunk := await asyncio.to_thread(fh.read, chunk_bytes):
                yield chunk
        finally:
            fh.close()

    async def get_file(self, key: str, path: Path) -> None:
        source = self._path(key)
        try:
            await asyncio.to_thread(shutil.copyfile, source, path)
        except FileNotFoundError as exc:
            if not source.exists():
                raise missing(self, key) from exc
            raise StorageError(f"cannot copy object {key} to {path}: {exc}") from exc

    async def get_file_verified(self, key: str, sha256: str, path: Path) -> None:
        """Copy and hash in one pass; a mismatch removes ``path`` and raises IntegrityError."""
        source = self._path(key)
        try:
            actual = await asyncio.to_thread(_copy_hashing, source, path)
        except FileNotFoundError as exc:
            if not source.exists():
                raise missing(self, key) from exc
            raise StorageError(f"cannot copy object {key} to {path}: {exc}") from exc
        if actual != sha256:
            path.unlink(missing_ok=True)
            raise corrupted(key, sha256, actual)

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self._path(key).is_file)

    async def missing(self, keys: Iterable[str]) -> set[str]:
        paths = {key: self._path(key) for key in keys}
        return await asyncio.to_thread(lambda: {k for k, p in paths.items() if not p.is_file()})

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._path(key).unlink, missing_ok=True)

    async def list(self, prefix: str = "") -> list[str]:
        return await asyncio.to_thread(_list_keys, self.root, prefix)


def _copy_hashing(source: Path, target: Path) -> str:
    digest = hashlib.sha256()
    with source.open("rb") as src, target.open("wb") as dst:
        while chunk := src.read(CHUNK_BYTES):
            digest.update(chunk)
            dst.write(chunk)
    return digest.hexdigest()


def _list_keys(root: Path, prefix: str) -> list[str]:
    base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    start = root / base_dir if base_dir else root
    keys = []
    for dirpath, _dirs, files in os.walk(start):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        for name in files:
            if name.startswith(TMP_PREFIX):
                continue
            key = name if rel_dir == "." else f"{rel_dir}/{name}"
            if key.startswith(prefix):
                keys.append(key)
    return sorted(keys)
