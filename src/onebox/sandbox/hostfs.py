"""Host access to a workspace that untrusted code writes: the one place it happens.

Sandboxed code owns every name in its workspace and can swap any of them for a
symlink, a FIFO or a device at any moment, while host code runs as root. So host
code never resolves a workspace path by name. It opens the workspace root once and
resolves every relative path from that fd with ``openat2(RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` where the kernel has it (checked
once), else one ``O_NOFOLLOW`` open per component. Changes (mkdir, chmod, chown,
unlink, rename) are made relative to directory fds, never by path.

    with hostfs.root(workspace) as root_fd:
        data = hostfs.read_bounded(root_fd, ".onebox/s1.result.json", max_bytes=1 << 20)
        for item in hostfs.walk(root_fd, hostfs.Bounds(max_entries=50_000)):
            ...

Reads refuse anything but a regular file (a FIFO is never blocked on: ``O_NONBLOCK``
and an ``lstat`` before the open) and check the size before reading. Walks are
iterative, with bounds on entries, depth and time, and hold one fd per level.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SYS_OPENAT2 = 437  # the same number on every architecture (the unified syscall table)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
CHUNK_BYTES = 1 << 20
_ZEROS = bytes(CHUNK_BYTES)

Kind = Literal["file", "dir", "symlink", "other"]


class Refused(OSError):
    """A workspace name is not what host code accepts (symlink, FIFO, device, too large)."""


class BoundExceeded(Exception):
    """A walk passed one of its bounds; ``bound`` names it (max_entries, max_depth, deadline_s)."""

    def __init__(self, bound: str, limit: float, message: str) -> None:
        super().__init__(message)
        self.bound, self.limit = bound, limit


@dataclass(frozen=True)
class Bounds:
    """How far a walk may go before it stops with :class:`BoundExceeded`."""

    max_entries: int = 200_000
    max_depth: int = 256
    deadline_s: float = 60.0


@dataclass(frozen=True)
class Item:
    """One entry met by :func:`walk`; ``st`` is its lstat, ``target`` a symlink's text."""

    path: str
    kind: Kind
    st: os.stat_result
    target: str | None = None


# -- resolving names -----------------------------------------------------------------


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_openat2_ok: bool | None = None


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path`` (None when it is gone): the same file, not only the same
    name (a workspace replaced under its path, a record another process rewrote)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE)
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dir_fd),
                       ctypes.c_char_p(os.fsencode(rel)), ctypes.byref(how),
                       ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return int(fd)


def has_openat2() -> bool:
    """Whether this kernel (and any seccomp filter around us) allows openat2; checked once."""
    global _openat2_ok
    if _openat2_ok is None:
        try:
            os.close(_openat2(os.open("/", DIR_FLAGS), ".", DIR_FLAGS, 0))
            _openat2_ok = True
        except OSError as exc:
            _openat2_ok = exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL)
    return _openat2_ok


def parts(rel: str) -> list[str]:
    """The components of a relative path that stays beneath its root (else Refused)."""
    names = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in names or "\x00" in rel:
        raise Refused(errno.EINVAL, "path must be relative and stay inside the workspace", rel)
    return names


def open_at(dir_fd: int, rel: str, flags: int, mode: int = 0) -> int:
    """Open ``rel`` beneath ``dir_fd`` with no symlink on any component (ELOOP/ENOTDIR if one)."""
    names = parts(rel)
    if not names:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=dir_fd)
    if has_openat2():
        return _openat2(dir_fd, "/".join(names), flags, mode)
    fd = os.open(".", DIR_FLAGS, dir_fd=dir_fd)
    try:
        for name in names[:-1]:
            inner = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(names[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def open_dir(dir_fd: int, rel: str) -> int:
    return open_at(dir_fd, rel, DIR_FLAGS)


@contextlib.contextmanager
def root(path: Path) -> Iterator[int]:
    """An fd on a workspace root (itself not a symlink), closed on exit."""
    fd = os.open(path, DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def split_parent(rel: str) -> tuple[str, str]:
    names = parts(rel)
    if not names:
        raise Refused(errno.EINVAL, "path names no file", rel)
    return "/".join(names[:-1]), names[-1]


# -- reading ------------------------------------------------------------------------


def open_regular(dir_fd: int, rel: str) -> tuple[int, os.stat_result]:
    """A read-only fd on a regular file and its fstat. A symlink on any component, a FIFO,
    a device or a socket is refused without being opened for I/O (lstat first, then an
    O_NOFOLLOW|O_NONBLOCK open, then fstat: the file opened is the one checked)."""
    parent, name = split_parent(rel)
    with opened(open_dir(dir_fd, parent)) as pfd:
        if not stat.S_ISREG(os.stat(name, dir_fd=pfd, follow_symlinks=False).st_mode):
            raise Refused(errno.EINVAL, "not a regular file", rel)
        fd = os.open(name, READ_FLAGS, dir_fd=pfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused(errno.EINVAL, "not a regular file", rel)
    return fd, st


def read_bounded(dir_fd: int, rel: str, max_bytes: int) -> bytes:
    """The bytes of a regular file, refused (Refused, EFBIG) if larger than ``max_bytes``."""
    fd, st = open_regular(dir_fd, rel)
    with opened(fd):
        if st.st_size > max_bytes:
            raise Refused(errno.EFBIG, f"{st.st_size} bytes, over the {max_bytes}-byte bound", rel)
        chunks, total = [], 0
        while chunk := os.read(fd, min(CHUNK_BYTES, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise Refused(errno.EFBIG, f"grew past the {max_bytes}-byte bound", rel)
    return b"".join(chunks)


def data_segments(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """(offset, length) of each allocated run of a file (SEEK_DATA/SEEK_HOLE)."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                return
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        if end > start:
            yield start, end - start
        offset = end


def data_runs(fd: int, size: int, max_runs: int) -> tuple[tuple[int, int], ...] | None:
    """The file's data runs (:func:`data_segments`), or None when it has more than
    ``max_runs`` of them."""
    runs: list[tuple[int, int]] = []
    for run in data_segments(fd, size):
        runs.append(run)
        if len(runs) > max_runs:
            return None
    return tuple(runs)


def sparse_digests(fd: int, size: int, runs: tuple[tuple[int, int], ...]) -> tuple[str, str]:
    """sha256 of the whole file (holes fed as zeros) and of its ``runs`` put end to end,
    reading each run once. OSError when a run no longer holds its bytes (the file shrank)."""
    whole, data, offset = hashlib.sha256(), hashlib.sha256(), 0
    for start, length in runs:
        _feed_zeros(whole, start - offset)
        for chunk in read_run(fd, start, length):
            whole.update(chunk)
            data.update(chunk)
        offset = start + length
    _feed_zeros(whole, size - offset)
    return whole.hexdigest(), data.hexdigest()


def read_run(fd: int, start: int, length: int) -> Iterator[bytes]:
    """The ``length`` bytes at ``start``, in chunks; OSError if the file ends before."""
    done = 0
    while done < length:
        chunk = os.pread(fd, min(CHUNK_BYTES, length - done), start + done)
        if not chunk:
            raise OSError(errno.EIO, f"the file ended {length - done} bytes early")
        done += len(chunk)
        yield chunk


def allocated_bytes(fd: int, size: int) -> int:
    return sum(length for _start, length in data_segments(fd, size))


def sha256_fd(fd: int, size: int) -> str:
    """sha256 of the first ``size`` bytes; holes are fed as zeros without being read."""
    digest, offset = hashlib.sha256(), 0
    for start, length in list(data_segments(fd, size)):
        _feed_zeros(digest, start - offset)
        os.lseek(fd, start, os.SEEK_SET)
        left = length
        while left > 0 and (chunk := os.read(fd, min(CHUNK_BYTES, left))):
            digest.update(chunk)
            left -= len(chunk)
        _feed_zeros(digest, left)
        offset = start + length
    _feed_zeros(digest, size - offset)
    return digest.hexdigest()


def _feed_zeros(digest: hashlib._Hash, count: int) -> None:
    while count > 0:
        digest.update(_ZEROS[: min(count, CHUNK_BYTES)])
        count -= CHUNK_BYTES


# -- walking ------------------------------------------------------------------------


def kind_of(mode: int) -> Kind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def walk(root_fd: int, bounds: Bounds = Bounds(), *, skip_top: frozenset[str] = frozenset(),
         pruned: list[str] | None = None) -> Iterator[Item]:
    """Every entry beneath ``root_fd``, depth first, names sorted; never follows a symlink.

    Iterative: one open fd per directory level (at most ``max_depth``). A directory
    swapped for something else between its lstat and its open is not entered. Raises
    BoundExceeded when an entry count, depth or the deadline is passed (the items
    already yielded stay valid); with a ``pruned`` list, a directory past the depth
    bound is recorded there and not entered, and the walk goes on."""
    deadline = time.monotonic() + bounds.deadline_s
    seen = 0
    stack: list[tuple[int, str, Iterator[str]]] = []
    try:
        fd = os.open(".", DIR_FLAGS, dir_fd=root_fd)
        stack.append((fd, "", iter(n for n in _names(fd, bounds.max_entries) if n not in skip_top)))
        while stack:
            fd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(stack.pop()[0])
                continue
            seen += 1
            _check(seen, len(stack), bounds, deadline)
            item = _item(fd, rel, name)
            if item is None:
                continue
            yield item
            if item.kind != "dir":
                continue
            if pruned is not None and len(stack) >= bounds.max_depth:
                pruned.append(item.path)
            else:
                _descend(stack, fd, item, bounds, seen)
    finally:
        for fd, _rel, _names_left in stack:
            os.close(fd)


def _check(seen: int, depth: int, bounds: Bounds, deadline: float) -> None:
    if seen > bounds.max_entries:
        raise BoundExceeded("max_entries", bounds.max_entries,
                            f"more than {bounds.max_entries} entries")
    if time.monotonic() > deadline:
        raise BoundExceeded("deadline_s", bounds.deadline_s,
                            f"walking took longer than {bounds.deadline_s} s")


def _names(fd: int, max_entries: int) -> list[str]:
    names = []
    with os.scandir(fd) as it:
        for entry in it:
            names.append(entry.name)
            if len(names) > max_entries:
                raise BoundExceeded("max_entries", max_entries,
                                    f"a directory holds more than {max_entries} entries")
    return sorted(names)


def _item(dir_fd: int, rel: str, name: str) -> Item | None:
    path = f"{rel}/{name}" if rel else name
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        kind = kind_of(st.st_mode)
        target = os.readlink(name, dir_fd=dir_fd) if kind == "symlink" else None
    except OSError:  # vanished or swapped while we looked: skip it
        return None
    return Item(path, kind, st, target)


def _descend(stack: list[tuple[int, str, Iterator[str]]], dir_fd: int, item: Item,
             bounds: Bounds, seen: int) -> None:
    if len(stack) >= bounds.max_depth:
        raise BoundExceeded("max_depth", bounds.max_depth,
                            f"directories nested deeper than {bounds.max_depth} levels "
                            f"(at {item.path[:200]}...)")
    try:
        fd = os.open(item.path.rsplit("/", 1)[-1], DIR_FLAGS, dir_fd=dir_fd)
    except OSError:  # swallow-ok: swapped for a symlink or removed since its lstat: skip it
        return
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (item.st.st_dev, item.st.st_ino):
            raise OSError(errno.ESTALE, "directory replaced during the walk")
        names = _names(fd, bounds.max_entries - seen)
    except OSError:
        os.close(fd)
        return
    except BaseException:
        os.close(fd)
        raise
    stack.append((fd, item.path, iter(names)))


# -- changing -----------------------------------------------------------------------


def make_dirs(dir_fd: int, rel: str, mode: int = 0o755,
              owner: tuple[int, int] | None = None) -> int:
    """Open directory ``rel`` beneath ``dir_fd``, creating missing components (each given
    ``owner``); a symlink or file in the way is refused. Returns the directory's fd."""
    fd = os.open(".", DIR_FLAGS, dir_fd=dir_fd)
    try:
        for name in parts(rel):
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=fd)
            inner = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
            if owner is not None and os.fstat(fd).st_uid != owner[0]:
                os.fchown(fd, *owner)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_file(dir_fd: int, rel: str, data: bytes | Path, *, mode: int = 0o644,
               owner: tuple[int, int] | None = None, exclusive: bool = False) -> None:
    """Write ``data`` to ``rel`` (parents created); never through a symlink, FIFO or device.
    A ``Path`` is a host file onebox staged (an upload): the kernel copies it in chunks."""
    parent, name = split_parent(rel)
    flags = WRITE_FLAGS | (os.O_EXCL if exclusive else 0)
    with opened(make_dirs(dir_fd, parent, owner=owner)) as pfd:
        fd = os.open(name, flags, mode, dir_fd=pfd)
    with opened(fd):
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(errno.EINVAL, "not a regular file", rel)
        os.ftruncate(fd, 0)
        if isinstance(data, Path):
            _copy_in(fd, data)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        if owner is not None:
            os.fchown(fd, *owner)


def _copy_in(fd: int, source: Path) -> None:
    with opened(os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)) as src:
        while os.sendfile(fd, src, None, CHUNK_BYTES):
            pass


def chmod_at(dir_fd: int, rel: str, mode: int) -> None:
    """chmod a file or directory through an fd on it (a symlink is refused, never followed)."""
    with opened(open_at(dir_fd, rel, os.O_PATH | os.O_NOFOLLOW)) as fd:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise Refused(errno.ELOOP, "is a symlink", rel)
        os.chmod(f"/proc/self/fd/{fd}", mode)


def chown_at(dir_fd: int, rel: str, owner: tuple[int, int]) -> None:
    """lchown: a symlink itself gets the owner, its target is never touched."""
    parent, name = split_parent(rel)
    with opened(open_dir(dir_fd, parent)) as pfd:
        os.chown(name, *owner, dir_fd=pfd, follow_symlinks=False)


def unlink_at(dir_fd: int, rel: str) -> None:
    parent, name = split_parent(rel)
    with opened(open_dir(dir_fd, parent)) as pfd:
        os.unlink(name, dir_fd=pfd)


def rename_at(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str) -> None:
    """Rename one name of a directory fd to one name of another (no path resolution)."""
    for name in (src, dst):
        if "/" in name or name in ("", ".", ".."):
            raise Refused(errno.EINVAL, "rename takes a single name", name)
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def remove_tree(dir_fd: int, name: str) -> None:
    """Delete ``name`` under ``dir_fd`` and all beneath it, through fds only (iterative)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    stack = [(os.dup(dir_fd), name)]
    try:
        while stack:
            parent_fd, child = stack[-1]
            if not _clear_one(stack, parent_fd, child):
                continue
            os.rmdir(child, dir_fd=parent_fd)
            os.close(stack.pop()[0])
    finally:
        for fd, _child in stack:
            os.close(fd)


def _clear_one(stack: list[tuple[int, str]], parent_fd: int, child: str) -> bool:
    """Unlink the non-directories of ``child``; push its first subdirectory (False) or
    report it empty of subdirectories (True)."""
    with opened(os.open(child, DIR_FLAGS, dir_fd=parent_fd)) as fd:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o700)
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                stack.append((os.open(child, DIR_FLAGS, dir_fd=parent_fd), entry.name))
                return False
            os.unlink(entry.name, dir_fd=fd)
    return True
