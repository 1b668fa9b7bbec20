"""A session whose owner process died is reclaimed (engine.sessions.reclaim_abandoned) only
when the owner is provably gone from this host and this sandbox dir: never a live process's
session, another machine's, or another home's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from onebox.sandbox.sweep import DeadOwnerSweeper, OwnerLock, claim_of

DIES_HOLDING_ITS_LOCK = (
    "import os, sys; from pathlib import Path; from onebox.sandbox.sweep import OwnerLock; "
    "lock = OwnerLock(Path(sys.argv[1])); print(lock.claim, flush=True); os._exit(9)")


class _NoIdentities:
    """Session uids are not what this test is about (gone() never frees one)."""

    def free(self, workspace: Path, uid: int | None) -> None:
        raise AssertionError("gone() must not free uids")

    def uids_of(self, workspace: Path) -> list[int]:
        raise AssertionError("gone() must not read uids")


def test_only_a_dead_owner_of_this_host_and_dir_is_gone(tmp_path: Path) -> None:
    state = tmp_path / "sandbox"
    mine = OwnerLock(state)
    sweeper = DeadOwnerSweeper(state, _NoIdentities(), mine)
    died = subprocess.run([sys.executable, "-c", DIES_HOLDING_ITS_LOCK, str(state)],
                          capture_output=True, text=True, timeout=60)
    dead = died.stdout.strip()
    assert (state / "owners" / f"{dead.rsplit(':', 1)[1]}.lock").exists()  # it held a lock
    live = OwnerLock(state)  # another owner, alive (this process holds its lock)
    try:
        assert sweeper.gone(dead)
        assert not sweeper.gone(live.claim)
        assert not sweeper.gone(mine.claim)
        token = dead.rsplit(":", 1)[1]
        assert not sweeper.gone(claim_of(tmp_path / "another-home", token))
        assert not sweeper.gone(f"another-host:{state}:{token}")
        assert not sweeper.gone("garbage")
    finally:
        live.close()
        mine.close()
