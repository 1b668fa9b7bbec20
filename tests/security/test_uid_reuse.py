"""A session uid is handed out again only when nothing of its old session runs, and never
one that /etc/subuid or /etc/subgid delegates to an account."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from onebox.sandbox.identity import SessionIdentities, processes_of

UID = 264_321  # inside the default session range, outside any account


@pytest.fixture(autouse=True)
def _root() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("per-session uids need root")
    yield
    for pid in processes_of(UID):
        os.kill(pid, 9)


def _leftover(uid: int, secret: Path) -> None:
    """What an escaped session leaves: a daemon running as its uid (re-parented to init)
    that keeps trying to read the next owner's file."""
    loop = f"while :; do cat {secret} >> /tmp/onebox-leftover-{uid} 2>/dev/null; sleep 0.05; done"
    subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "sh", "-c", f"( {loop} ) >/dev/null 2>&1 & "], check=True)


def test_a_uid_is_not_given_again_while_a_process_of_it_lives(tmp_path: Path) -> None:
    ids = SessionIdentities(tmp_path / "registry", UID, UID)
    first = tmp_path / "ws-alice"
    first.mkdir()
    assert ids.claim(first) == (UID, UID)
    bob_secret = tmp_path / "ws-bob" / "secret.txt"
    _leftover(UID, bob_secret)
    time.sleep(0.2)
    assert processes_of(UID), "the leftover runs as the session uid (the probe is real)"
    first.rmdir()
    ids.free(first, UID)
    second = tmp_path / "ws-bob"
    second.mkdir()
    assert ids.claim(second) == (UID, UID)
    bob_secret.write_text("bob's launch code")
    os.chown(bob_secret, UID, UID)
    time.sleep(0.3)
    assert processes_of(UID) == [], "a process of the old session survived the uid's reuse"
    stolen = Path(f"/tmp/onebox-leftover-{UID}")
    assert not stolen.exists() or "launch code" not in stolen.read_text()
    stolen.unlink(missing_ok=True)


def test_delegated_subordinate_ids_are_never_handed_out(tmp_path: Path) -> None:
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text(f"builder:{UID}:5\n")
    subgid.write_text(f"builder:{UID + 5}:3\n")
    ids = SessionIdentities(tmp_path / "registry", UID, UID + 8, subid_files=(subuid, subgid))
    ws = tmp_path / "ws"
    ws.mkdir()
    assert ids.claim(ws) == (UID + 8, UID + 8)


def test_markers_of_deleted_homes_are_reclaimed_at_start(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    old, fresh = registry / str(UID), registry / str(UID + 1)
    old.write_text(str(tmp_path / "deleted-home" / "workspaces" / "s1"))
    fresh.write_text(str(tmp_path / "being-claimed"))  # another process, mid-claim
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    SessionIdentities(registry, UID, UID + 8)
    assert not old.exists(), "the marker of a workspace that is gone stays taken"
    assert fresh.exists(), "a marker being claimed right now was taken away"
