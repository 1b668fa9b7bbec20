"""Two hosts sharing one database and one object store: a run whose steps land on both reads
the newest workspace, never a stale copy left on a host (issue: s3 on host A printed v1).

A "host" is a sandbox backend on its own home (its own sandbox root and workspaces) and a
worker on it; both share the database and the object store, as machines of one cluster do.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from onebox.agent.plan import parse_plan
from onebox.config import Settings, load_settings
from onebox.objects.fs import FsObjectStore
from onebox.runtime.engine.sessions import release_copies_left_here
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.registry import get_backend
from onebox.store.db import Database

PLAN = {"name": "two-hosts", "steps": [
    {"id": "s1", "tool": "bash", "code": "echo v1 > state.txt"},
    {"id": "ok1", "kind": "approval", "input": {"prompt": "go on?"}, "depends_on": ["s1"]},
    {"id": "s2", "tool": "bash", "code": "echo v2 > state.txt", "depends_on": ["ok1"]},
    {"id": "ok2", "kind": "approval", "input": {"prompt": "go on?"},
     "depends_on": ["s2"]},
    {"id": "s3", "tool": "bash", "code": "cat state.txt", "depends_on": ["ok2"]},
]}


def _host(settings: Settings, home: Path) -> Settings:
    other = load_settings(home=home, database_url=settings.database_url,
                          sandbox=settings.sandbox.model_copy(), runtime=settings.runtime)
    return other


async def _run_until(db: Database, backend: SandboxBackend, settings: Settings,
                     objects: FsObjectStore, run_id: object, status: set[str]) -> None:
    """Serve the run on one host until it reaches one of ``status``, then stop that host."""
    stop = asyncio.Event()
    worker = Worker(db, backend, settings, run_id=run_id, objects=objects)  # type: ignore[arg-type]
    serving = asyncio.create_task(worker.serve(stop, drain_s=5))
    try:
        for _ in range(1200):
            if (await runs_api.get_run(db, run_id))["status"] in status:  # type: ignore[arg-type]
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"run never reached {status}")
    finally:
        stop.set()
        await asyncio.wait_for(serving, 30)


@pytest.mark.onebox_settings({"runtime.lease_s": 2.0})
async def test_a_step_on_a_host_with_a_stale_copy_reads_the_newest_workspace(
        db: Database, settings: Settings, tmp_path: Path) -> None:
    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.1, 0.2
    host_a, host_b = settings, _host(settings, tmp_path / "host-b")
    assert host_a.sandbox_dir != host_b.sandbox_dir  # two sandbox roots: two machines' disks
    objects = FsObjectStore(tmp_path / "shared-objects", fsync=False)
    a, b = get_backend(host_a), get_backend(host_b)
    try:
        run = (await submit_plan(db, settings, parse_plan(PLAN))).run_id
        session = f"run-{run}"
        await _run_until(db, a, host_a, objects, run, {"WAITING"})
        assert (a.workspace(session) / "state.txt").read_text() == "v1\n"
        await a.close()  # host A's worker restarts: a new process finds the copy there
        a = get_backend(host_a)
        await runs_api.approve_step(db, settings, run, "ok1", approve=True, by="test")
        await _run_until(db, b, host_b, objects, run, {"WAITING"})
        assert (b.workspace(session) / "state.txt").read_text() == "v2\n"
        assert a.workspace(session).exists(), \
            "host A still holds its stale copy (the probe's precondition; its disk image is " \
            "mounted again when a step uses it)"
        await runs_api.approve_step(db, settings, run, "ok2", approve=True, by="test")
        await _run_until(db, a, host_a, objects, run, {"SUCCEEDED", "FAILED", "DEAD"})
        steps = {s["step_id"]: s for s in await runs_api.run_steps(db, run)}
        assert steps["s3"]["stdout"] == "v2\n", steps["s3"]["stdout"]
        events = [e for e in await runs_api.run_events(db, run)
                  if e["type"] == "workspace_restored"]
        assert any(e["payload"].get("reason") == "stale" for e in events), events
        from onebox.runtime.services.explain import explain

        said = await explain(db, run)
        text = "\n".join(f"{d['step']} {d['kind']} {d['reason']}" for d in said)
        assert "s3 restore workspace brought to this step's view" in text and "on another host" in text, text
        starts = {d["step"]: d["reason"] for d in said if d["kind"] == "start"}
        assert starts["s1"] != starts["s2"], "explain names the worker (host) of each step"
        assert not a.workspace(session).exists(), "the host that ended the run released it"
        assert b.workspace(session).exists()
        assert await release_copies_left_here(db, b) == [session]  # B's worker chore
        assert not b.workspace(session).exists(), "B's copy went with the run"
        registry = settings.sandbox.uid_registry
        held = [m.name for m in registry.iterdir() if m.is_file()
                and session in m.read_text(errors="replace")] if registry.exists() else []
        assert not held, f"session uids still held for removed copies: {held}"
    finally:
        await a.close()
        await b.close()
        await objects.close()


WIDE = {"name": "wide", "steps": [
    *({"id": f"p{n}", "tool": "bash",
       "code": f"mkdir -p out && sleep 0.{n % 4} && echo {n} > out/p{n}.txt"}
      for n in range(30)),
    {"id": "join", "tool": "bash", "code": "ls out | sort -V | tr '\\n' ' '; echo",
     "depends_on": [f"p{n}" for n in range(30)]},
]}


@pytest.mark.onebox_settings({"runtime.lease_s": 5.0})
async def test_parallel_steps_on_three_hosts_all_reach_the_join(
        db: Database, settings: Settings, tmp_path: Path) -> None:
    """30 parallel steps spread over three hosts, each writing its own file; the join sees
    all 30 (before: each host's snapshot replaced the others', and the join saw one host's)."""
    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.05, 0.5
    hosts = [settings, _host(settings, tmp_path / "host-b"), _host(settings, tmp_path / "host-c")]
    objects = FsObjectStore(tmp_path / "shared-objects", fsync=False)
    backends = [get_backend(h) for h in hosts]
    run = (await submit_plan(db, settings, parse_plan(WIDE))).run_id
    stop = asyncio.Event()
    workers = [Worker(db, b, h, run_id=run, objects=objects, concurrency=4,  # type: ignore[arg-type]
                      name=f"host-{n}") for n, (b, h) in enumerate(zip(backends, hosts, strict=True))]
    serving = [asyncio.create_task(w.serve(stop, drain_s=5)) for w in workers]
    try:
        for _ in range(1200):
            if (await runs_api.get_run(db, run))["status"] in {"SUCCEEDED", "FAILED", "DEAD"}:
                break
            await asyncio.sleep(0.05)
        assert (await runs_api.get_run(db, run))["status"] == "SUCCEEDED"
        steps = {s["step_id"]: s for s in await runs_api.run_steps(db, run)}
        events = await runs_api.run_events(db, run)
        assert steps["join"]["stdout"].split() == [f"p{n}.txt" for n in range(30)]
        ran_on = {e["payload"]["worker"] for e in events if e["type"] == "step_started"}
        assert len(ran_on) >= 2, f"the steps did not spread: {ran_on}"
        assert not any(e["type"] == "workspace_merged" for e in events), \
            "no two steps wrote one path ('out', made by all, is the same directory)"
        started = [e for e in events if e["type"] == "step_started"]
        assert len(started) == 31, "no step ran twice"
    finally:
        stop.set()
        await asyncio.gather(*serving)
        for backend in backends:
            await backend.close()
        await objects.close()
