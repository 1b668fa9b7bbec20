"""A session uid is handed out again only when nothing of its old session runs, and never
one that /etc/subuid or /etc/subgid delegates to an account."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from onebox.errors import SandboxUnavailable
from onebox.sandbox import homes
from onebox.sandbox.identity import SessionIdentities, processes_of
from onebox.sandbox.sweep import OwnerLock

UID = 264_321  # inside the default session range, outside any account


@pytest.fixture(autouse=True)
def _root() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("per-session uids need root")
    yield
    for pid in processes_of(UID):
        os.kill(pid, 9)


def _leftover(uid: int, base: Path, log: Path) -> None:
    """What an escaped session leaves: a daemon running as its uid (re-parented to init)
    that keeps reading the workspace files of the sessions under ``base``."""
    files = f"{base}/ws-alice/secret.txt {base}/ws-bob/secret.txt"
    loop = f"while :; do cat {files} >> {log} 2>/dev/null; sleep 0.05; done"
    subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "sh", "-c", f"( {loop} ) >/dev/null 2>&1 & "], check=True)


def _read_within(log: Path, text: str, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def test_a_uid_is_not_given_again_while_a_process_of_it_lives(tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="onebox-uid-reuse-", dir="/var/tmp"))
    os.chmod(base, 0o711)  # session users traverse it, as they do sandbox.root
    log = base / "stolen"
    log.touch()
    os.chown(log, UID, UID)
    try:
        ids = SessionIdentities(tmp_path / "registry", UID, UID)
        alice = base / "ws-alice"
        alice.mkdir()
        (alice / "secret.txt").write_text("alice's note")
        assert ids.claim(alice) == (UID, UID)
        _leftover(UID, base, log)
        assert _read_within(log, "alice's note", 10), "the probe never read its own workspace"
        shutil.rmtree(alice)
        ids.free(alice, UID)
        bob = base / "ws-bob"
        bob.mkdir()
        (bob / "secret.txt").write_text("bob's launch code")
        assert ids.claim(bob) == (UID, UID)
        assert not _read_within(log, "launch code", 1.0), \
            "a process of the old session read the next session's workspace"
        assert processes_of(UID) == [], "a process of the old session survived the uid's reuse"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_delegated_subordinate_ids_are_never_handed_out(tmp_path: Path) -> None:
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text(f"root:100000:65536\nbuilder:{UID - 2}:5\n# a comment\n")
    subgid.write_text(f"builder:{UID + 3}:5\n")
    ids = SessionIdentities(tmp_path / "registry", UID, UID + 8, subid_files=(subuid, subgid))
    ws = tmp_path / "ws"
    ws.mkdir()
    assert ids.claim(ws) == (UID + 8, UID + 8)
    assert f"skipping {UID}-{UID + 7}, delegated by /etc/subuid" in ids.info().describe()
    with pytest.raises(SandboxUnavailable, match=f"{UID}-{UID + 7}"):
        other = tmp_path / "ws2"
        other.mkdir()
        ids.claim(other)


def test_missing_subordinate_id_files_delegate_nothing(tmp_path: Path) -> None:
    ids = SessionIdentities(tmp_path / "registry", UID, UID,
                            subid_files=(tmp_path / "none", tmp_path / "neither"))
    ws = tmp_path / "ws"
    ws.mkdir()
    assert ids.claim(ws) == (UID, UID)
    assert "skipping" not in ids.info().describe()


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


def test_dirs_of_deleted_homes_are_reclaimed_with_their_uids(tmp_path: Path) -> None:
    root, ids = tmp_path / "homes", SessionIdentities(tmp_path / "registry", UID, UID + 8)

    def state_dir_of(home: Path, *, age_s: float = 3600) -> Path:
        state_dir = root / homes.dir_name(home)
        state_dir.mkdir(parents=True)
        homes.record(state_dir, home)
        then = time.time() - age_s
        os.utime(state_dir / "home", (then, then))
        return state_dir

    gone, live = tmp_path / "gone-home", tmp_path / "live-home"
    live.mkdir()
    orphan = state_dir_of(gone)
    workspace = orphan / "workspaces" / "s1"
    workspace.mkdir(parents=True)
    assert ids.claim(workspace) == (UID, UID)
    leftover = subprocess.Popen(["setpriv", f"--reuid={UID}", f"--regid={UID}",
                                 "--clear-groups", "sleep", "1000"], start_new_session=True)
    kept = [state_dir_of(live), state_dir_of(tmp_path / "just-gone", age_s=0),
            state_dir_of(tmp_path / "gone-but-running")]
    lock = OwnerLock(kept[-1])  # a onebox process still runs on that dir
    no_record = root / "0123456789abcdef"
    no_record.mkdir()
    try:
        while not processes_of(UID):
            time.sleep(0.02)  # the leftover is running as the session uid (the probe is real)
        assert (tmp_path / "registry" / str(UID)).exists()
        me = tmp_path / "me"
        (root / homes.dir_name(me)).mkdir()
        removed = homes.start(root / homes.dir_name(me), me, ids, homes=root)
        survivors = processes_of(UID)
    finally:
        lock.close()
        leftover.kill()
        leftover.wait()
    assert removed == [orphan] and not orphan.exists()
    assert not (tmp_path / "registry" / str(UID)).exists(), "the gone home's uid stays taken"
    assert survivors == [], "the gone home's session process was not ended"
    assert all(d.exists() for d in [*kept, no_record]), "a dir that may be live was removed"
    assert (root / homes.dir_name(me) / "home").read_text() == str(me)


def test_a_dir_another_server_reclaims_first_does_not_stop_this_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts sharing /var/lib/onebox/homes start together and reclaim the same gone homes;
    the one that comes second finds the dir (or its record) removed under it. That start
    must go on (it crashed: the server's port was open and its first requests were cut)."""
    root, ids = tmp_path / "homes", SessionIdentities(tmp_path / "registry", UID, UID + 8)
    orphans = []
    for n in range(3):
        home = tmp_path / f"gone-{n}"
        state_dir = root / homes.dir_name(home)
        state_dir.mkdir(parents=True)
        homes.record(state_dir, home)
        os.utime(state_dir / "home", (time.time() - 3600, time.time() - 3600))
        orphans.append(state_dir)
    seen = homes._orphaned

    def peer_first(state_dir: Path) -> bool:
        found = seen(state_dir)
        if found and state_dir == orphans[1]:
            shutil.rmtree(state_dir)  # the other server got there between the two looks
        return found
    monkeypatch.setattr(homes, "_orphaned", peer_first)
    me = tmp_path / "me"
    (root / homes.dir_name(me)).mkdir()
    removed = homes.start(root / homes.dir_name(me), me, ids, homes=root)
    assert not any(d.exists() for d in orphans)
    assert orphans[0] in removed and orphans[2] in removed


def test_pods_with_their_own_registries_never_share_a_uid(tmp_path: Path) -> None:
    """Kubernetes: each pod keeps its own registry (an emptyDir), and two pods on one node
    gave one host uid to two tenants' sessions. With a slots dir every process of the
    machine shares (a hostPath), each process takes a slice of the range of its own."""
    def pod(n: int, slots_dir: Path | None) -> SessionIdentities:
        return SessionIdentities(tmp_path / f"registry-{n}-{slots_dir is not None}", UID,
                                 UID + 7, slots_dir=slots_dir, slots=2)

    def claimed(ids: SessionIdentities, n: int) -> int:
        workspace = tmp_path / f"ws-{n}-{id(ids)}"
        workspace.mkdir()
        return ids.claim(workspace)[0]

    alone = [pod(n, None) for n in range(2)]
    assert claimed(alone[0], 0) == claimed(alone[1], 1), "the probe: the old collision"
    slots = tmp_path / "node-slots"
    first, second = pod(0, slots), pod(1, slots)
    assert (first.uid_min, first.uid_max, second.uid_min, second.uid_max) == \
        (UID, UID + 3, UID + 4, UID + 7)
    ours = {claimed(first, n) for n in range(4)}
    theirs = {claimed(second, n + 4) for n in range(4)}
    assert not ours & theirs
    with pytest.raises(SandboxUnavailable, match="UID_SLOTS"):
        pod(2, slots)  # a third process: both slots held
    first.close()  # its process ended: the kernel dropped its lock
    assert pod(3, slots).uid_min == UID
