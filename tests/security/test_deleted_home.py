"""A home deleted after its onebox was killed leaves nothing of its tenants behind.

As root with a private home, a home's sessions live in /var/lib/onebox/homes/<hash>, each
workspace a mounted disk image. A onebox killed with its sessions open leaves those mounts
(and the run dir's and warm pool's), and the next start on the machine refused to reclaim a
gone home's dir while anything was mounted below it: the workspace, with a tenant's files in
it, and its uid marker stayed for good. The start that finds such a dir unmounts what its
dead processes left and removes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from onebox.config import load_settings
from onebox.sandbox import homes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="private homes' dirs need root")

KILLED = textwrap.dedent("""
    import asyncio, os, sys
    from pathlib import Path
    from onebox.config import load_settings
    from onebox.sandbox.base import ExecRequest
    from onebox.sandbox.registry import get_backend

    async def main():
        backend = get_backend(load_settings(home=Path(sys.argv[1])))
        for n in range(2):
            done = await backend.execute(ExecRequest(
                session_id=f"api-00000000000000a{n}", language="bash",
                code="echo another-tenants-secret > secret.txt"))
            assert done.ok, done
        print(backend.workspace("api-00000000000000a0"), flush=True)
        os._exit(0)  # as kill -9: nothing is closed, unmounted or released

    asyncio.run(main())
""")


def _mounts_below(path: Path) -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        points = [line.split()[4] for line in fh]
    return [p for p in points if p == str(path) or p.startswith(f"{path}/")]


def test_a_killed_onebox_whose_home_is_deleted_leaves_no_workspace_mount_or_uid(
        tmp_path: Path) -> None:
    gone = tmp_path / "gone-home"
    out = subprocess.run([sys.executable, "-c", KILLED, str(gone)], capture_output=True,
                         text=True, timeout=120, check=True)
    workspace = Path(out.stdout.strip().splitlines()[-1])
    state_dir = load_settings(home=gone).sandbox_dir
    assert state_dir.parent == homes.HOMES and workspace.is_relative_to(state_dir)
    assert (workspace / "secret.txt").read_text() == "another-tenants-secret\n"
    uid = workspace.stat().st_uid
    marker = load_settings(home=gone).sandbox.uid_registry / str(uid)
    assert marker.exists() and _mounts_below(state_dir), "the probe's precondition"

    subprocess.run(["rm", "-rf", str(gone)], check=True)
    an_hour_ago = time.time() - 3600
    os.utime(state_dir / homes.RECORD, (an_hour_ago, an_hour_ago))
    me = tmp_path / "next-home"
    subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import asyncio, sys
        from pathlib import Path
        from onebox.config import load_settings
        from onebox.sandbox.registry import get_backend

        async def main():
            await get_backend(load_settings(home=Path(sys.argv[1]))).close()

        asyncio.run(main())
    """), str(me)], check=True, timeout=120)

    assert _mounts_below(state_dir) == []
    assert not state_dir.exists(), "the gone home's workspaces are still on disk"
    assert not marker.exists() or marker.read_text() != str(workspace), \
        "the gone home's session uid stays taken"
