"""What the bubblewrap backend's parts (warm pool, successors, interpreters, result
building) use of the backend they serve, as a Protocol: the parts depend on this, the
backend (:class:`onebox.sandbox.linux.BwrapSandbox`) provides it, and no part imports the
backend's module back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar, Protocol

from onebox.config import SandboxSettings
from onebox.sandbox import policy
from onebox.sandbox.base import ExecRequest
from onebox.sandbox.cgroups import CgroupManager, CgroupUsage
from onebox.sandbox.disk import LoopDiskQuota
from onebox.sandbox.identity import SessionIdentities
from onebox.sandbox.sessions import SessionTable
from onebox.sandbox.spawner import Blocked
from onebox.sandbox.sweep import DeadOwnerSweeper, OwnerLock


class BwrapHost(Protocol):
    name: ClassVar[str]
    isolation: ClassVar[str]
    cfg: SandboxSettings
    state_dir: Path
    run_root: Path
    owner_lock: OwnerLock
    identities: SessionIdentities
    cgroups: CgroupManager | None
    disk: LoopDiskQuota
    disk_enabled: bool
    seccomp_enabled: bool
    sessions: SessionTable
    sweeper: DeadOwnerSweeper
    _cleanups: set[asyncio.Task[None]]

    async def spawn(self, workspace: Path, limits: policy.ResolvedLimits,
                    request: ExecRequest | None) -> Blocked: ...

    def _usage(self, exec_id: str) -> CgroupUsage: ...

    async def discard(self, blocked: Blocked) -> None: ...

    def discard_later(self, blocked: Blocked) -> None: ...

    async def make_workspace(self, path: Path) -> None: ...

    async def drop_workspace(self, path: Path) -> None: ...
