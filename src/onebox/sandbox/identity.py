"""Which host user a session's sandbox runs as: never host root.

When onebox runs as root, every session gets its own unprivileged host uid (and a
gid of the same number) from a reserved range (``sandbox.session_uid_min`` ..
``session_uid_max``). The workspace root directory is owned by it and is mode 0700,
and bubblewrap is started as that user, so code that escaped every namespace would
be an ordinary user that cannot read another session's files, write kernel settings
or signal the supervisor. The workspace root's owner *is* the session's identity:
there is no other table to get out of step with it.

A uid is never one a local account or group has, nor one that ``/etc/subuid`` or
``/etc/subgid`` delegates to an account (its user namespaces map onto those ids). A uid is
given again only once nothing of its old session runs: processes still running as it (as a
real, effective, saved or filesystem id) are killed when its workspace is freed and again
before it is handed out; a uid whose processes cannot be killed is skipped.

Allocations are machine-wide marker files (one per uid, created with ``O_EXCL``,
holding the workspace path) in ``sandbox.uid_registry``, so two onebox processes,
or two homes on one machine, never hand out the same uid. A uid is freed when its
session's files are gone; markers left by a crashed process or a deleted home are swept
when onebox starts (those older than a minute) and when the range runs out (a marker whose
workspace no longer exists, or is owned by someone else, is stale).

When onebox runs as a normal user, the sandbox maps to that user, as before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from onebox.errors import SandboxUnavailable

logger = logging.getLogger(__name__)

Owner = tuple[int, int]
Span = tuple[int, int]  # first..last id, inclusive
MAX_CHOWN_ENTRIES = 1_000_000
ONEBOX_VAR = Path("/var/lib/onebox")
SUBID_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))
MARKER_GRACE_S = 60.0  # a marker this old without its workspace is a leftover


@dataclass(frozen=True)
class IdentityInfo:
    """What ``onebox doctor`` shows: whom a sandbox is on the host."""

    per_session: bool
    uid_min: int
    uid_max: int
    fixed: Owner | None
    delegated: tuple[Span, ...] = ()  # parts of the range /etc/subuid or /etc/subgid delegate

    def describe(self) -> str:
        if self.per_session:
            skipped = ", ".join(f"{lo}-{hi}" for lo, hi in self.delegated)
            return (f"a per-session unprivileged host uid/gid from {self.uid_min}-{self.uid_max} "
                    "(onebox runs as root)" + (f"; skipping {skipped}, delegated by /etc/subuid "
                                               "or /etc/subgid" if skipped else ""))
        assert self.fixed is not None
        return f"host uid {self.fixed[0]} gid {self.fixed[1]} (the user running onebox)"


class SessionIdentities:
    """Allocates, adopts and frees the host identity of session workspaces."""

    def __init__(self, registry: Path, uid_min: int, uid_max: int, *,
                 subid_files: tuple[Path, ...] = SUBID_FILES,
                 slots_dir: Path | None = None, slots: int = 1) -> None:
        self.registry = registry
        self.per_session = os.geteuid() == 0
        self._slot_fd = -1
        if self.per_session and slots_dir is not None:
            self._slot_fd, uid_min, uid_max = _take_slot(slots_dir, slots, uid_min, uid_max)
        self.uid_min, self.uid_max = uid_min, uid_max
        self._next = uid_min
        self.delegated = _delegated_spans(uid_min, uid_max, subid_files) if self.per_session else ()
        self._taken = (_local_ids(uid_min, uid_max).union(*(range(lo, hi + 1)
                                                            for lo, hi in self.delegated))
                       if self.per_session else frozenset())
        if self.per_session:
            registry.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(registry, 0o700)
            self._sweep(min_age_s=MARKER_GRACE_S)  # markers of deleted homes and workspaces

    def close(self) -> None:
        """Give this process's slot of the machine's uid range back (see uid_slots_dir)."""
        if self._slot_fd >= 0:
            os.close(self._slot_fd)
            self._slot_fd = -1

    def info(self) -> IdentityInfo:
        fixed = None if self.per_session else (os.getuid(), os.getgid())
        return IdentityInfo(self.per_session, self.uid_min, self.uid_max, fixed, self.delegated)

    def owner_of(self, workspace: Path) -> Owner:
        """The identity a sandbox on ``workspace`` runs as (its root directory's owner)."""
        if not self.per_session:
            return (os.getuid(), os.getgid())
        st = os.stat(workspace, follow_symlinks=False)
        if not self.in_range(st.st_uid):
            raise SandboxUnavailable(
                f"workspace {workspace.name} is owned by uid {st.st_uid}, not a session uid; "
                "refusing to run a sandbox that could map to it")
        return (st.st_uid, st.st_gid)

    def in_range(self, uid: int) -> bool:
        return self.uid_min <= uid <= self.uid_max

    def claim(self, workspace: Path) -> Owner:
        """Give ``workspace`` (an existing directory) its identity; adopt the one it has.

        A workspace left by an earlier onebox keeps its uid. One owned by anyone else
        (root, from an older onebox) is given a fresh uid, recursively, without
        following any link.
        """
        if not self.per_session:
            return (os.getuid(), os.getgid())
        st = os.stat(workspace, follow_symlinks=False)
        if self.in_range(st.st_uid) and st.st_uid == st.st_gid:
            self._mark(st.st_uid, workspace, exclusive=False)
            os.chmod(workspace, 0o700)
            return (st.st_uid, st.st_gid)
        uid = self._allocate(workspace)
        chown_tree(workspace, (uid, uid))
        os.chmod(workspace, 0o700)
        return (uid, uid)

    def moved(self, workspace: Path) -> None:
        """A workspace was renamed (the warm pool hands one over): record its new path."""
        if self.per_session:
            uid = os.stat(workspace, follow_symlinks=False).st_uid
            if self.in_range(uid):
                self._mark(uid, workspace, exclusive=False)

    def free(self, workspace: Path, uid: int | None) -> None:
        """The workspace's files are gone: its uid may be given to a new session."""
        if not self.per_session or uid is None or not self.in_range(uid):
            return
        if os.path.lexists(workspace):
            logger.warning("not freeing uid %s: %s still exists", uid, workspace)
            return
        marker = self._marker(uid)
        with contextlib.suppress(OSError):
            if marker.read_text() == str(workspace):
                if not end_processes_of(uid):
                    logger.warning("not freeing uid %s: its processes outlive SIGKILL", uid)
                    return
                marker.unlink()

    def free_removed(self, workspace: Path, uids: list[int]) -> None:
        """``workspace`` was just removed: free ``uids`` (read before, :meth:`uids_of`) and any
        uid whose marker still records it (a create that raced the removal may have marked
        one after the owner was read)."""
        for uid in sorted(set(uids).union(self.recording(workspace))):
            self.free(workspace, uid)

    def uids_of(self, workspace: Path) -> list[int]:
        """The uids to free once ``workspace`` is removed: its owner's, or, when its owner
        is not a session uid (an image that is not mounted here leaves a bare mount point,
        owned by root), the uids whose marker records this path."""
        owner = uid_of(workspace)
        if owner is not None and self.in_range(owner):
            return [owner]
        return self.recording(workspace)

    def recording(self, workspace: Path) -> list[int]:
        """The uids whose marker records exactly ``workspace``."""
        if not self.per_session:
            return []
        return sorted(uid for uid, path in self.uids_below(workspace).items() if path == workspace)

    def uids_below(self, root: Path) -> dict[int, Path]:
        """The uids whose marker records a workspace below ``root`` (a dir being removed)."""
        held: dict[int, Path] = {}
        for marker in self.registry.iterdir():
            with contextlib.suppress(OSError):
                if marker.name.isdigit() and Path(marker.read_text()).is_relative_to(root):
                    held[int(marker.name)] = Path(marker.read_text())
        return held

    def _allocate(self, workspace: Path) -> int:
        for sweep in (False, True):
            if sweep:
                self._sweep()
            uid = self._first_free(workspace)
            if uid is not None:
                return uid
        skipped = "".join(f", {lo}-{hi}" for lo, hi in self.delegated)
        raise SandboxUnavailable(
            f"no free session uid in {self.uid_min}-{self.uid_max}: every one has a live "
            "workspace, keeps a process that outlived SIGKILL, belongs to a local account or is "
            f"delegated by /etc/subuid or /etc/subgid{skipped and ' (' + skipped[2:] + ')'}. Fix: remove "
            "idle sessions, or move ONEBOX_SANDBOX__SESSION_UID_MIN/_MAX to free ids")

    def _first_free(self, workspace: Path) -> int | None:
        span = self.uid_max - self.uid_min + 1
        start = self._next
        for offset in range(span):
            uid = self.uid_min + (start - self.uid_min + offset) % span
            if uid not in self._taken and self._mark(uid, workspace, exclusive=True):
                if not end_processes_of(uid):  # left by an escape; never share the uid
                    logger.warning("skipping session uid %s: its processes outlive SIGKILL", uid)
                    self._marker(uid).unlink(missing_ok=True)
                    continue
                self._next = uid + 1 if uid < self.uid_max else self.uid_min
                return uid
        return None

    def _marker(self, uid: int) -> Path:
        return self.registry / str(uid)

    def _mark(self, uid: int, workspace: Path, *, exclusive: bool) -> bool:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_EXCL if exclusive else os.O_TRUNC)
        try:
            fd = os.open(self._marker(uid), flags, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(str(workspace))
        return True

    def _sweep(self, min_age_s: float = 0.0) -> None:
        """Drop markers whose workspace is gone or belongs to another uid (crash leftovers,
        deleted homes); with ``min_age_s``, only markers older than that (a marker another
        process is claiming right now has no workspace owner yet)."""
        now = time.time()
        for marker in self.registry.iterdir():
            if not marker.name.isdigit() or _younger(marker, now - min_age_s):
                continue
            if _stale(marker, int(marker.name)):
                logger.info("freeing session uid %s: its workspace is gone", marker.name)
                marker.unlink(missing_ok=True)


def identities_for(cfg: SandboxSettingsLike) -> SessionIdentities:
    """The session identities a backend with these settings hands out."""
    return SessionIdentities(cfg.uid_registry, cfg.session_uid_min, cfg.session_uid_max,
                             slots_dir=cfg.uid_slots_dir, slots=cfg.uid_slots)


class SandboxSettingsLike(Protocol):
    uid_registry: Path
    session_uid_min: int
    session_uid_max: int
    uid_slots_dir: Path | None
    uid_slots: int


def _take_slot(slots_dir: Path, slots: int, uid_min: int, uid_max: int) -> tuple[int, int, int]:
    """Lock the first free slot of ``slots_dir`` (held while this process lives: the kernel
    drops a dead process's lock, whatever container it ran in) and return its descriptor and
    the slice of uid_min..uid_max it owns."""
    size = (uid_max - uid_min + 1) // slots
    if size < 1:
        raise SandboxUnavailable(f"sandbox.uid_slots ({slots}) is larger than the session uid "
                                 f"range {uid_min}-{uid_max}: lower it or widen the range")
    slots_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for slot in range(slots):
        fd = os.open(slots_dir / f"{slot}.lock",
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        lo = uid_min + slot * size
        logger.info("session uids from slot %d of %s: %d-%d", slot, slots_dir, lo, lo + size - 1)
        return fd, lo, lo + size - 1
    raise SandboxUnavailable(
        f"all {slots} slots of the session uid range in {slots_dir} are held by other onebox "
        "processes of this machine: raise sandbox.uid_slots (ONEBOX_SANDBOX__UID_SLOTS) or run "
        "fewer onebox processes (pods) on it")


def make_run_dir(run_dir: Path, gid: int | None) -> None:
    """A directory of onebox's for one execution (launcher, entry code): root's, readable
    by the session's group only (``gid``; None when sandboxes run as onebox's own user)."""
    run_dir.mkdir(mode=0o750)
    if gid is not None:
        os.chown(run_dir, 0, gid)
    os.chmod(run_dir, 0o750)


def uid_of(path: Path) -> int | None:
    """The owner of ``path`` (not followed), or None if it is gone: read before removing a
    workspace, to :meth:`SessionIdentities.free` its uid afterwards."""
    try:
        return os.stat(path, follow_symlinks=False).st_uid
    except OSError:
        return None


def _local_ids(lo: int, hi: int) -> frozenset[int]:
    """uids and gids of this host's own accounts and groups inside the range: a session must
    never become one of them (an escape would then own that account's files)."""
    ids: set[int] = set()
    for path in ("/etc/passwd", "/etc/group"):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text(errors="replace").splitlines():
                fields = line.split(":")
                if len(fields) > 2 and fields[2].isdigit() and lo <= int(fields[2]) <= hi:
                    ids.add(int(fields[2]))
    return frozenset(ids)


def _delegated_spans(lo: int, hi: int, files: tuple[Path, ...]) -> tuple[Span, ...]:
    """The parts of lo..hi that subordinate-id files (``name:start:count`` lines) delegate,
    merged and sorted; a missing file delegates nothing."""
    spans: list[Span] = []
    for path in files:
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                fields = line.strip().split(":")
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    first, last = int(fields[1]), int(fields[1]) + int(fields[2]) - 1
                    if first <= hi and last >= lo and last >= first:
                        spans.append((max(lo, first), min(hi, last)))
    merged: list[Span] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return tuple(merged)


def processes_of(uid: int) -> list[int]:
    """Pids with ``uid`` as any of their user or group ids (real, effective, saved, fs)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _runs_as(entry.name, uid):
            found.append(int(entry.name))
    return found


def _runs_as(pid: str, uid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("State:") and line.split()[1:2] == ["Z"]:
                    return False  # a zombie runs nothing; its parent reaps it
                if line.startswith(("Uid:", "Gid:")) and str(uid) in line.split()[1:]:
                    return True
    except OSError:
        return False  # gone meanwhile
    return False


def end_processes_of(uid: int, *, wait_s: float = 2.0) -> bool:
    """SIGKILL every process running as ``uid``; True once none is left (within ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while pids := processes_of(uid):
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return True


def _younger(marker: Path, than: float) -> bool:
    try:
        return marker.stat(follow_symlinks=False).st_mtime > than
    except OSError:
        return True  # gone meanwhile: nothing to do


def _stale(marker: Path, uid: int) -> bool:
    try:
        path = marker.read_text()
        return os.stat(path, follow_symlinks=False).st_uid != uid
    except (OSError, ValueError):
        return True


def chown_tree(root: Path, owner: Owner) -> None:
    """chown every entry under ``root`` through directory fds, never following a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    stack, seen = [fd], 0
    try:
        os.fchown(fd, *owner)
        while stack:
            dir_fd = stack.pop()
            try:
                for name in os.listdir(dir_fd):
                    seen += 1
                    if seen > MAX_CHOWN_ENTRIES:
                        raise SandboxUnavailable(f"workspace {root} has too many entries to adopt")
                    child = _chown_entry(dir_fd, name, owner)
                    if child is not None:
                        stack.append(child)
            finally:
                os.close(dir_fd)
    finally:
        for left in stack:
            os.close(left)


def _chown_entry(dir_fd: int, name: str, owner: Owner) -> int | None:
    """chown one entry; a directory is returned opened (O_NOFOLLOW) for the walk."""
    os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        return None
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            return None
        raise


def ensure_reachable(path: Path) -> None:
    """Session users must traverse every directory down to ``path``: give o+x to the ones
    onebox made (``path`` itself, /var/lib/onebox/...), refuse a root elsewhere that lacks it."""
    for part in (path, *path.parents):
        st = os.stat(part)
        if st.st_mode & 0o001:
            continue
        if part == path or part.is_relative_to(ONEBOX_VAR):
            os.chmod(part, stat.S_IMODE(st.st_mode) | 0o111)
        else:
            raise SandboxUnavailable(
                f"sandbox.root {path} is below {part} (mode {stat.S_IMODE(st.st_mode):o}), which "
                "session users cannot traverse; set ONEBOX_SANDBOX__ROOT to a directory whose "
                "parents are world-searchable, or leave it unset (/var/lib/onebox/homes/...)")
