"""A disk cap per session workspace: a sparse ext4 image, loop-mounted on the workspace dir.

Writing past the cap fails inside the sandbox with ENOSPC ("No space left on
device"); the host disk holds at most ``disk_mb`` for the session. A template
image per size is formatted once per home and copied sparsely, so a new session
costs a copy and a mount. Templates are shared by every process on the home: created
atomically (formatted under a temporary name, renamed) and never deleted by a process. Needs root (mount); without it the backend falls back to
RLIMIT_FSIZE (a per-file cap) and says so in ``ExecResult.enforcement``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

logger = logging.getLogger(__name__)
MOUNTS_LOCK = "mounts.lock"


class LoopDiskQuota:
    """Creates, mounts and removes per-session disk images under ``images_dir``."""

    def __init__(self, images_dir: Path, owner: tuple[int, int], token: str) -> None:
        self.images_dir = images_dir
        self.owner = owner
        self.token = token
        self._lock = asyncio.Lock()

    @staticmethod
    def supported() -> bool:
        tools = all(shutil.which(t) for t in ("mkfs.ext4", "mount", "umount"))
        return os.geteuid() == 0 and tools and Path("/dev/loop-control").exists()

    async def _template(self, disk_mb: int) -> Path:
        """The shared template of ``disk_mb`` MB: formatted under a name of this process's,
        then renamed into place, so no process ever copies a half-formatted one; never
        deleted by a process (another may be copying it)."""
        async with self._lock:
            path = self.images_dir / f"template-{disk_mb}.img"
            if path.exists():
                return path
            self.images_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = self.images_dir / f"template-{disk_mb}.{self.token}.tmp"
            owner = f"root_owner={self.owner[0]}:{self.owner[1]}"
            try:
                await _run(
                    "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner,
                    "-T", "small", str(tmp), f"{disk_mb}M",
                )  # fmt: skip
                os.rename(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            return path

    def image_of(self, workspace: Path) -> Path:
        return self.images_dir / f"{workspace.parent.name}-{workspace.name}.img"

    @contextlib.asynccontextmanager
    async def mounting(self) -> AsyncIterator[None]:
        """One process of this home at a time mounts, or unmounts, a workspace's image (an
        flock on ``mounts.lock`` in the home's sandbox state dir, beside ``images/``; a mount
        takes milliseconds): two workers of one host starting steps of one run had each
        mounted it, and the second mount's writes were lost."""
        self.images_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.images_dir.parent / MOUNTS_LOCK,
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    async def mount(self, image: Path, workspace: Path) -> None:
        await _run("mount", "-o", "loop,nosuid,nodev", str(image), str(workspace))

    async def attach(self, workspace: Path, disk_mb: int) -> None:
        """Mount a fresh image of ``disk_mb`` MB on ``workspace`` (an empty directory)."""
        template = await self._template(disk_mb)
        image = self.image_of(workspace)
        await _run("cp", "--sparse=always", str(template), str(image))
        try:
            await self.mount(image, workspace)
        except OSError:
            image.unlink(missing_ok=True)
            raise
        with contextlib.suppress(OSError):
            os.chmod(workspace, 0o755)
            os.rmdir(workspace / "lost+found")

    async def unmount(self, workspace: Path) -> None:
        """Unmount (lazily, so a straggler cannot block it); the image and its files stay."""
        if os.path.ismount(workspace):
            with contextlib.suppress(OSError):
                await _run("umount", "-l", str(workspace))

    async def detach(self, workspace: Path) -> None:
        """Unmount and delete the image: the session's files are gone."""
        await self.unmount(workspace)
        self.image_of(workspace).unlink(missing_ok=True)



async def _run(*argv: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        message = err.decode(errors="replace").strip()
        raise OSError(f"{argv[0]} failed ({proc.returncode}): {message}")
