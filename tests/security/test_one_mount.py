"""One mount of a workspace image per host: two workers of one home (two backends here, as
two processes would be) opening the same session at once mount its image once, and its
writes are all kept (before, each mounted it: 3 of 60 runs lost a write)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from sbx_helpers import DISK_MB

from onebox.config import SandboxSettings, load_settings
from onebox.sandbox.linux import BwrapSandbox


def _backend(home: Path) -> BwrapSandbox:
    sandbox = SandboxSettings(backend="linux", timeout_s=20, disk_mb=DISK_MB, pool_size=0)
    return BwrapSandbox(load_settings(home=home, sandbox=sandbox))


def _mounts_of(path: Path) -> int:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return sum(1 for line in f if line.split()[4] == str(path))


async def test_two_workers_of_one_home_mount_a_workspace_once(sec_home: Path,
                                                               tmp_path: Path) -> None:
    home = tmp_path / "shared-home"
    first, second = _backend(home), _backend(home)
    assert first.disk_enabled, "the probe needs loop-mounted disk caps"
    try:
        for round_ in range(5):
            path = first.workspace(f"both-{round_}")
            assert path == second.workspace(f"both-{round_}")
            await asyncio.gather(first.make_workspace(path), second.make_workspace(path))
            assert os.path.ismount(path)
            assert _mounts_of(path) == 1, f"round {round_}: mounted {_mounts_of(path)} times"
            await first.drop_workspace(path)
            assert _mounts_of(path) == 0
    finally:
        await first.close()
        await second.close()
