"""A snapshot as a streamed ``.tar.gz``: headers generated from the manifest, file bodies
read from the object store chunk by chunk, compressed off the event loop.

Nothing is restored to disk and the archive is never held whole: memory stays at a
chunk or two whatever the snapshot's size. Every file is hashed as it is sent; an
object that does not match its manifest entry raises IntegrityError mid-stream, so
the response ends without the gzip trailer and no client can mistake it for a
complete archive. Symlinks whose target leaves the tree are left out, as on restore.

    async for piece in snapshot_tar_gz(store, manifest):
        out.write(piece)
"""

from __future__ import annotations

import asyncio
import hashlib
import tarfile
import time
import zlib
from collections.abc import AsyncIterator, Iterator

from onebox.objects.base import CHUNK_BYTES, ObjectStore, blob_key, corrupted
from onebox.sandbox.snapshot_manifest import Entry, Manifest, escapes

BLOCK = tarfile.BLOCKSIZE
GZIP_LEVEL = 6
_GZIP_WBITS = 31  # zlib writes a gzip header and trailer


async def snapshot_tar_gz(store: ObjectStore, manifest: Manifest) -> AsyncIterator[bytes]:
    """The snapshot's tree as gzip-compressed tar pieces, in manifest order."""
    gz = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    mtime = int(time.time())
    for entry in manifest.entries:
        if entry.type == "symlink" and escapes(entry):
            continue
        async for raw in _member(store, entry, mtime):
            if piece := await asyncio.to_thread(gz.compress, raw):
                yield piece
    yield gz.compress(b"\0" * (2 * BLOCK)) + gz.flush()


async def _member(store: ObjectStore, entry: Entry, mtime: int) -> AsyncIterator[bytes]:
    """One tar member: its header, then (for a file) its verified body and padding."""
    yield header(entry, mtime)
    if entry.type != "file" or entry.sha256 is None:
        return
    key = blob_key(entry.blob_sha256 or "")
    digest, sent = hashlib.sha256(), 0
    async for chunk in _content(store, key, entry):
        sent += len(chunk)
        if sent > entry.size:
            raise corrupted(key, entry.sha256, f"(longer than {entry.size} bytes)")
        digest.update(chunk)
        yield chunk
    if digest.hexdigest() != entry.sha256:
        raise corrupted(key, entry.sha256, digest.hexdigest())
    yield b"\0" * (-sent % BLOCK)


async def _content(store: ObjectStore, key: str, entry: Entry) -> AsyncIterator[bytes]:
    """The file's whole content: its blob, or for a sparse file its data runs from the blob
    with zeros for the holes between them (the caller checks the whole against sha256)."""
    if entry.extents is None:
        async for chunk in store.iter_chunks(key, CHUNK_BYTES):
            yield chunk
        return
    runs = iter(entry.extents)
    at, run = 0, next(runs, None)
    left = 0
    async for chunk in store.iter_chunks(key, CHUNK_BYTES):
        while chunk:
            if left == 0:
                if run is None:
                    raise corrupted(key, entry.sha256 or "", "(longer than its data runs)")
                for zeros in _zeros(run[0] - at):
                    yield zeros
                at, left, run = run[0], run[1], next(runs, None)
            piece, chunk = chunk[:left], chunk[left:]
            at, left = at + len(piece), left - len(piece)
            yield piece
    for zeros in _zeros(entry.size - at):
        yield zeros


def _zeros(count: int) -> Iterator[bytes]:
    """``count`` zero bytes (a hole), in chunks: a hole may be gigabytes."""
    while count > 0:
        yield bytes(min(count, CHUNK_BYTES))
        count -= CHUNK_BYTES


def header(entry: Entry, mtime: int) -> bytes:
    """The tar header block(s) of a manifest entry (PAX, so long names and sizes fit)."""
    info = tarfile.TarInfo(entry.path)
    info.mtime = mtime
    info.mode = entry.mode
    if entry.type == "file":
        info.size = entry.size
    elif entry.type == "dir":
        info.type = tarfile.DIRTYPE
    else:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target or "", 0o777
    return info.tobuf(format=tarfile.PAX_FORMAT)
