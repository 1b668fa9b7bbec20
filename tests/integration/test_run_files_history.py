"""A run's files are one history (issue 36): each step starts on its own view of what the
steps it depends on left, its change set is exactly what it did, a fenced attempt commits
nothing, a step that changes nothing leaves the head alone, and two steps writing one path
are resolved by the plan. On the real database and sandbox."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from run_helpers import serve_until_ended

from onebox.agent.plan import parse_plan
from onebox.config import Settings, load_settings
from onebox.errors import LeaseLost
from onebox.objects.fs import FsObjectStore
from onebox.runtime.engine.code_steps import CODE
from onebox.runtime.engine.queue import claim_steps, sweep_expired
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.forks import fork_run
from onebox.runtime.services.service import Runtime
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.registry import get_backend
from onebox.sandbox.snapshots import load_manifest
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database


@pytest.fixture
async def rt(db: Database, settings: Settings, tmp_path: Path) -> AsyncIterator[Runtime]:
    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.05, 0.2
    backend = get_backend(settings)
    objects = FsObjectStore(tmp_path / "objects", fsync=False)
    yield Runtime(settings, db, backend, objects=objects)
    await backend.close()
    await objects.close()


async def head_files(rt: Runtime, run_id: uuid.UUID) -> list[str]:
    async with rt.db.connection() as conn:
        head = await snapshot_rows.latest_commit(conn, f"run-{run_id}")
    assert head is not None, "the run has a head"
    manifest = await load_manifest(rt.objects, str(head["sha256"]).strip())
    return sorted(e.path for e in manifest.files())


async def steps_of(rt: Runtime, run_id: uuid.UUID) -> dict[str, dict]:
    return {s["step_id"]: s for s in await runs_api.run_steps(rt.db, run_id)}


async def test_a_step_that_changes_nothing_leaves_the_head_alone(rt: Runtime) -> None:
    """Observation 1: s2 (`ls`) changed nothing; the head rolled back to s0's (a.txt only)."""
    run = await rt.run_plan(parse_plan({"steps": [
        {"id": "s0", "tool": "bash", "code": "echo a > a.txt"},
        {"id": "s1", "tool": "bash", "code": "echo b > b.txt", "depends_on": ["s0"]},
        {"id": "s2", "tool": "bash", "code": "ls", "depends_on": ["s1"]},
    ]}))
    assert run["status"] == "SUCCEEDED", run["error"]
    assert (await steps_of(rt, run["id"]))["s2"]["stdout"].split() == ["a.txt", "b.txt"]
    assert await head_files(rt, run["id"]) == ["a.txt", "b.txt"]


async def test_a_fenced_attempt_commits_nothing(rt: Runtime) -> None:
    """Observation 2: an attempt whose lease was taken over while it wrote files: its files
    must not reach the retry or the steps after it, even on the host it ran on."""
    plan = parse_plan({"steps": [
        {"id": "w", "tool": "bash", "code": "touch \"f-$(date +%s%N)\"; ls | wc -l"},
        {"id": "r", "tool": "bash", "code": "ls | wc -l", "depends_on": ["w"]},
    ]})
    sub = await rt.submit(plan)
    worker = Worker(rt.db, rt.backend, rt.settings, objects=rt.objects, name="host-a")
    [row] = await claim_steps(rt.db, rt.settings, "host-a", 1, run_id=sub.run_id)
    performed = await CODE.perform(worker, row)
    assert performed.outcome.status == "SUCCESS"
    await rt.db.fetch("UPDATE onebox.task_execution SET lease_expires_at = now() - "
                        "interval '1 second' WHERE id = %s RETURNING id", (row["id"],))
    assert await sweep_expired(rt.db, rt.settings) == 1  # the lease is taken over
    with pytest.raises(LeaseLost):
        await CODE.archive(worker, row, performed)
    final = await rt.drive(sub.run_id)
    assert final["status"] == "SUCCEEDED", final["error"]
    steps = await steps_of(rt, sub.run_id)
    assert steps["w"]["attempt"] == 2 and steps["w"]["stdout"].strip() == "1"
    assert steps["r"]["stdout"].strip() == "1", "the fenced attempt's file reached a later step"
    assert len(await head_files(rt, sub.run_id)) == 1


SIBLINGS = {"steps": [
    {"id": "setup", "tool": "bash", "code": "echo base > shared.txt; echo keep > doomed.txt"},
    {"id": "p1", "tool": "bash", "depends_on": ["setup"],
     "code": "sleep 0.2; echo p1 > shared.txt; ls | tr '\\n' ' '"},
    {"id": "p2", "tool": "bash", "depends_on": ["setup"],
     "code": "echo p2 > shared.txt; echo p2 > mine.txt; ls | tr '\\n' ' '"},
    {"id": "p3", "tool": "bash", "depends_on": ["setup"], "code": "rm doomed.txt; ls | tr '\\n' ' '"},
    {"id": "p4", "tool": "bash", "depends_on": ["setup"],
     "code": "sleep 0.1; echo changed >> doomed.txt; ls | tr '\\n' ' '"},
    {"id": "join", "tool": "bash", "depends_on": ["p1", "p2", "p3", "p4"],
     "code": "for f in $(ls); do echo \"$f: $(cat $f | tr '\\n' ' ')\"; done"},
]}


async def test_parallel_siblings_never_see_each_other_and_the_plan_decides_overwrites(
        rt: Runtime) -> None:
    """Observation 3: parallel steps on one host shared one copy, so a step's change set
    carried a sibling's writes and the join depended on timing. Each sibling sees only
    setup's files; the join holds, for each path two siblings changed, the version of the
    step later in the plan, and the event names exactly those steps."""
    rt.settings.runtime.concurrency = 4
    run = await rt.run_plan(parse_plan(SIBLINGS))
    assert run["status"] == "SUCCEEDED", run["error"]
    steps = await steps_of(rt, run["id"])
    assert steps["p1"]["stdout"].split() == ["doomed.txt", "shared.txt"]
    assert steps["p2"]["stdout"].split() == ["doomed.txt", "mine.txt", "shared.txt"]
    assert steps["p3"]["stdout"].split() == ["shared.txt"]
    assert steps["p4"]["stdout"].split() == ["doomed.txt", "shared.txt"]
    assert steps["join"]["stdout"].splitlines() == [
        "doomed.txt: keep changed ", "mine.txt: p2 ", "shared.txt: p2 "]
    merged = [e["payload"] for e in await runs_api.run_events(rt.db, run["id"])
              if e["type"] == "workspace_merged"]
    overwrites = sorted((o["path"], o["kept"], o["lost"])
                        for p in merged for o in p["overwrites"])
    assert sorted(set(overwrites)) == [("doomed.txt", "p4", "p3"), ("shared.txt", "p2", "p1")]
    # observation 9: said by `onebox show` and the console, not only by explain and events
    from onebox.cli.render import summary_text
    from onebox.runtime.services.run_service import run_detail

    shown = summary_text(await runs_api.run_summary(rt.db, run["id"])).plain
    assert "files: shared.txt changed by p1 and p2" in shown and "p2's kept" in shown
    assert "files: doomed.txt changed by p3 and p4" in shown
    detail = await run_detail(rt.db, run["id"])
    said = [w["message"] for s in detail["steps"] for w in s["warnings"]
            if w["kind"] == "overwrite"]
    assert any("shared.txt: p2's version kept over p1's" in m for m in said), said


async def test_a_plan_can_ask_an_overwrite_to_fail_the_join(rt: Runtime) -> None:
    run = await rt.run_plan(parse_plan({**SIBLINGS, "conflicts": "fail"}))
    assert run["status"] in {"FAILED", "DEAD"}
    join = (await steps_of(rt, run["id"]))["join"]
    assert join["status"] == "FAILED"
    assert "workspace_conflict" in join["error"] and "conflicts: fail" in join["error"]
    assert "steps 'p1' and 'p2' both changed 'shared.txt'" in join["error"]
    assert "steps 'p3' and 'p4' both changed 'doomed.txt'" in join["error"]


QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


@pytest.mark.parametrize("at", ["revenue_by_region", "units_stats", "report"])
async def test_an_unchanged_fork_of_the_quickstart_succeeds_with_the_same_files(
        rt: Runtime, at: str) -> None:
    """Observation 4: a fork at one of two parallel steps lost the kept sibling's files."""
    from onebox.agent.plan import load_plan

    parent = await rt.run_plan(load_plan(QUICKSTART))
    assert parent["status"] == "SUCCEEDED", parent["error"]
    forked = await fork_run(rt.db, rt.settings, parent["id"], "default", at=at)
    child = await rt.drive(forked.run_id)
    assert child["status"] == "SUCCEEDED", child["error"]
    assert await head_files(rt, forked.run_id) == await head_files(rt, parent["id"])
    ours, theirs = await steps_of(rt, forked.run_id), await steps_of(rt, parent["id"])
    assert {k: s["output_hash"] for k, s in ours.items()} == \
        {k: s["output_hash"] for k, s in theirs.items()}


def _host(settings: Settings, home: Path) -> Settings:
    return load_settings(home=home, database_url=settings.database_url,
                         sandbox=settings.sandbox.model_copy(), runtime=settings.runtime)


async def test_a_copy_left_on_a_host_is_brought_to_the_step_view(
        rt: Runtime, tmp_path: Path) -> None:
    """Observation 11: a host's old copy (a killed worker's) was used as if current: a
    later step there listed nothing and a deleted file came back into the head."""
    plan = parse_plan({"steps": [
        {"id": "make", "tool": "bash", "code": "echo x > x.txt; echo y > y.txt"},
        {"id": "gate", "kind": "approval", "input": {"prompt": "go?"}, "depends_on": ["make"]},
        {"id": "drop", "tool": "bash", "code": "rm y.txt", "depends_on": ["gate"]},
        {"id": "gate2", "kind": "approval", "input": {"prompt": "go?"}, "depends_on": ["drop"]},
        {"id": "look", "tool": "bash", "code": "ls", "depends_on": ["gate2"]},
    ]})
    other = _host(rt.settings, tmp_path / "host-b")
    b = get_backend(other)
    try:
        sub = await submit_plan(rt.db, rt.settings, plan)
        session = f"run-{sub.run_id}"
        a_worker = Worker(rt.db, rt.backend, rt.settings, objects=rt.objects, name="a")
        b_worker = Worker(rt.db, b, other, objects=rt.objects, name="b")
        await _until(rt, sub.run_id, [a_worker], "WAITING")
        copy_a = rt.backend.workspace(session)
        (copy_a / "x.txt").unlink()  # what a killed worker's attempt may leave behind
        (copy_a / "junk.txt").write_text("half-written")
        await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate", approve=True, by="t")
        await _until(rt, sub.run_id, [b_worker], "WAITING")  # drop runs on host B
        await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate2", approve=True, by="t")
        await serve_until_ended([a_worker], rt.db, sub.run_id)  # look runs on host A again
        steps = await steps_of(rt, sub.run_id)
        assert steps["look"]["stdout"].split() == ["x.txt"]
        assert await head_files(rt, sub.run_id) == ["x.txt"]
        restored = [e["payload"] for e in await runs_api.run_events(rt.db, sub.run_id)
                    if e["type"] == "workspace_restored" and e["payload"]["step_id"] == "look"]
        assert [r["reason"] for r in restored] == ["stale"]
    finally:
        await b.close()


async def test_a_disk_image_a_dead_mount_namespace_left_never_reaches_a_step(
        rt: Runtime) -> None:
    """Found by the differential on the network-namespace cluster (5 of 40 seeds): a worker
    in its own mount namespace (`ip netns exec`, a pod) dies and its workspace image is
    unmounted with the namespace, leaving an empty mount point beside the image. The next
    worker on the host scanned the empty directory, took it for the step's (empty) view, and
    the sandbox then mounted the old image on it: the step saw a sibling's files."""
    import os
    import subprocess

    plan = parse_plan({"steps": [
        {"id": "sibling", "tool": "bash", "code": "echo s > sibling.txt"},
        {"id": "gate", "kind": "approval", "input": {"prompt": "go?"}},
        {"id": "look", "tool": "bash", "code": "ls", "depends_on": ["gate"]},
    ]})
    sub = await submit_plan(rt.db, rt.settings, plan)
    session = f"run-{sub.run_id}"
    first = Worker(rt.db, rt.backend, rt.settings, objects=rt.objects, name="first")
    stop = asyncio.Event()
    serving = asyncio.create_task(first.serve(stop, drain_s=5))
    try:
        for _ in range(600):  # the sibling ran; the gate waits
            if (await steps_of(rt, sub.run_id)).get("sibling", {}).get("status") == "SUCCESS":
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await serving
    copy = rt.backend.workspace(session)
    assert os.path.ismount(copy) and (copy / "sibling.txt").exists(), \
        "the probe needs the workspace on its own disk image"
    subprocess.run(["umount", "-l", str(copy)], check=True)  # the dead namespace's unmount
    assert not any(copy.iterdir())
    fresh = get_backend(rt.settings)  # the next worker process on this host
    try:
        await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate", approve=True, by="t")
        await serve_until_ended([Worker(rt.db, fresh, rt.settings, objects=rt.objects,
                                        name="next")], rt.db, sub.run_id)
        steps = await steps_of(rt, sub.run_id)
        assert steps["look"]["status"] == "SUCCESS", steps["look"]["error"]
        assert steps["look"]["stdout"].split() == [], "the step saw the sibling's files"
        assert await head_files(rt, sub.run_id) == ["sibling.txt"]
    finally:
        await fresh.close()


async def _until(rt: Runtime, run_id: uuid.UUID, workers: list[Worker], status: str) -> None:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.serve(stop, drain_s=5)) for w in workers]
    try:
        for _ in range(600):
            if (await runs_api.get_run(rt.db, run_id))["status"] == status:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"run never reached {status}")
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def _stored_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


async def test_kept_outputs_of_sparse_files_store_their_data_only(rt: Runtime) -> None:
    """Observation 7: six 30 MB sparse files holding 8 bytes each were kept at full size
    (+180 MiB in the object store); snapshots already stored only their data runs."""
    from onebox.runtime.engine.run_outputs import artifact

    run = await rt.run_plan(parse_plan({"outputs": ["*.bin"], "steps": [
        {"id": "holes", "tool": "python", "code": (
            "for i in range(6):\n"
            "    with open(f's{i}.bin', 'wb') as f:\n"
            "        f.seek(30 << 20)\n"
            "        f.write(b'12345678')\n")},
    ]}))
    assert run["status"] == "SUCCEEDED", run["error"]
    kept = await rt.db.fetch("SELECT path, size_bytes FROM onebox.run_files "
                             "WHERE run_id = %s AND kind = 'output' ORDER BY path", (run["id"],))
    assert [k["path"] for k in kept] == [f"s{i}.bin" for i in range(6)]
    assert all(k["size_bytes"] == (30 << 20) + 8 for k in kept)
    assert _stored_bytes(Path(rt.objects.root)) < 4 << 20  # type: ignore[attr-defined]
    whole = await artifact(rt.db, rt.objects, run["id"], "s3.bin")
    assert len(whole) == (30 << 20) + 8 and whole.endswith(b"12345678")
    assert whole[:1 << 20] == bytes(1 << 20)


async def test_an_object_the_store_lost_is_named_by_the_step_and_by_doctor(
        rt: Runtime, tmp_path: Path) -> None:
    """Observation 8: objects the database expects but the store lacks: a restore on
    another host failed with a bare NotFound (the run DEAD, no cause named) and `doctor`
    did not check it."""
    from onebox.runtime.services.doctor import check_objects

    plan = parse_plan({"steps": [
        {"id": "make", "tool": "bash", "code": "echo precious > keep.txt"},
        {"id": "gate", "kind": "approval", "input": {"prompt": "go?"}, "depends_on": ["make"]},
        {"id": "read", "tool": "bash", "code": "cat keep.txt", "depends_on": ["gate"]},
    ]})
    other = _host(rt.settings, tmp_path / "host-b")
    b = get_backend(other)
    try:
        sub = await submit_plan(rt.db, rt.settings, plan)
        await _until(rt, sub.run_id, [Worker(rt.db, rt.backend, rt.settings, objects=rt.objects,
                                             name="a")], "WAITING")
        lost = [p for p in Path(rt.objects.root).rglob("*")  # type: ignore[attr-defined]
                if p.is_file() and p.read_bytes() == b"precious\n"]
        assert lost, "the probe's precondition: the file's blob is stored"
        lost[0].unlink()
        rt.settings.objects_dir.parent.mkdir(parents=True, exist_ok=True)
        doctor_settings = load_settings(home=tmp_path / "doctor-home",
                                        database_url=rt.settings.database_url)
        (tmp_path / "doctor-home").mkdir(exist_ok=True)
        (tmp_path / "doctor-home" / "objects").symlink_to(rt.objects.root)  # type: ignore[attr-defined]
        check = await check_objects(doctor_settings)
        assert not check.ok and lost[0].name in check.detail and check.fix
        await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate", approve=True, by="t")
        await serve_until_ended([Worker(rt.db, b, other, objects=rt.objects, name="b")],
                                rt.db, sub.run_id)
        read = (await steps_of(rt, sub.run_id))["read"]
        assert read["status"] == "FAILED"
        assert lost[0].name in read["error"] and "onebox doctor" in read["error"]
    finally:
        await b.close()


async def test_a_run_cancelled_before_its_first_code_step_leaves_no_workspace(
        rt: Runtime, tmp_path: Path) -> None:
    """Observation 6: a task run cancelled while its model was asked kept its workspace
    (its inputs placed for the model's listing) with no sessions row: no sweep saw it."""
    from onebox.runtime.engine import run_files
    from onebox.runtime.engine.sessions import release_finished_sessions
    from onebox.runtime.engine.workspaces import StepWorkspace

    (tmp_path / "in.txt").write_text("input\n")
    inputs = await run_files.stage_local(rt.db, rt.objects, [tmp_path / "in.txt"],
                                         rt.settings.runtime)
    sub = await rt.submit(parse_plan({"steps": [
        {"id": "gate", "kind": "approval", "input": {"prompt": "go?"}},
        {"id": "s", "tool": "bash", "code": "cat in.txt", "depends_on": ["gate"]}]}),
        inputs=inputs)
    workspaces = StepWorkspace(rt.db, rt.backend, rt.objects, rt.settings)
    [plan] = await rt.db.fetch("SELECT id FROM onebox.plans WHERE run_id = %s", (sub.run_id,))
    session = f"run-{sub.run_id}"
    model_call = {"id": uuid.uuid4(), "run_id": sub.run_id, "session_id": session,
                  "step_id": "model-1", "plan_id": plan["id"], "trace_id": sub.trace_id,
                  "attempt": 1}
    await workspaces.prepare(model_call)  # what the agent does before it asks its model
    assert (rt.backend.workspace(session) / "in.txt").exists(), "the probe's precondition"
    await runs_api.cancel_run(rt.db, sub.run_id)
    await release_finished_sessions(rt.db, rt.backend, keep=workspaces)
    assert not rt.backend.workspace(session).exists()
