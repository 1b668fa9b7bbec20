"""Many hosts, simulated: three network namespaces, each with its own home, sandbox root,
`onebox serve` and `onebox worker`; one PostgreSQL over TCP, one S3 server over HTTP, a
round-robin balancer (tests/chaos/cluster.py). What an operator scaling out relies on:
every run ends with the right result, nothing runs twice, nothing is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import Cluster, alive, cluster, descendants

from onebox.config import load_settings
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.explain import explain
from onebox.store.db import Database

pytestmark = pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 (ip netns)")

FAST = {"ONEBOX_RUNTIME__LEASE_S": "4", "ONEBOX_RUNTIME__HEARTBEAT_S": "0.5",
        "ONEBOX_RUNTIME__POLL_S": "0.2", "ONEBOX_API__SERVER_LEASE_S": "4",
        "ONEBOX_API__SERVER_HEARTBEAT_S": "0.5", "ONEBOX_API__SESSION_SNAPSHOT_S": "2"}


@pytest.fixture
def three(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    with cluster(tmp_path, db_url, settings=FAST) as made:
        yield made


async def _key(db: Database) -> str:
    return (await create_key(db, tenant_id="acme", name="cluster"))[0]


def _client(base: str, key: str) -> httpx.AsyncClient:
    # no keep-alive: each request is a new connection, so the balancer spreads them
    return httpx.AsyncClient(base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}"},
                             limits=httpx.Limits(max_keepalive_connections=0))


async def _wait(client: httpx.AsyncClient, run_id: str, *statuses: str,
                timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = await client.get(f"/v1/runs/{run_id}")
        if got.status_code == 200 and got.json()["run"]["status"] in statuses:
            return dict(got.json()["run"])
        await asyncio.sleep(0.25)
    raise AssertionError(f"run {run_id} never reached {statuses}: {got.text[:500]}")


async def _steps(db: Database, run_id: str) -> list[dict[str, Any]]:
    return await db.fetch("SELECT step_id, attempt, status, stdout FROM onebox.task_execution "
                          "WHERE run_id = %s ORDER BY step_id, attempt", (run_id,))


async def _workers(db: Database, run_id: str) -> dict[str, str]:
    rows = await db.fetch("SELECT payload FROM onebox.agent_events WHERE run_id = %s AND "
                          "type = 'step_started' ORDER BY seq", (run_id,))
    return {r["payload"]["step_id"]: r["payload"]["worker"] for r in rows}


async def _finish(made: Cluster) -> None:
    """Every host runs a worker for a moment (a host that was down at the run's end sweeps
    its copies when it comes back), then everything stops."""
    for host in made.hosts:
        if "worker" not in host.processes:
            host.work()
    await asyncio.sleep(4)
    made.stop()


def _assert_clean(made: Cluster) -> None:
    """No workspace, workspace note or lock, mount, process or session uid marker left on
    any host."""
    problems = [p for host in made.hosts for p in leftovers(host.name, host.home, host.netns)]
    assert not problems, "\n".join(problems) + "\n" + "\n".join(h.log() for h in made.hosts)


def leftovers(name: str, home: Path, netns: str | None) -> list[str]:
    """What a host left: its workspaces (where that host keeps them: beside its home or
    under its sandbox dir), notes and locks, mounts under either, processes in its network
    namespace, uid markers naming one of its workspaces."""
    settings = load_settings(home=home)
    sandbox, workspaces = settings.sandbox_dir, settings.workspaces_dir
    out = []
    left = sorted(p.name for p in workspaces.iterdir()) if workspaces.exists() else []
    if left:
        out.append(f"{name} keeps workspaces {left} in {workspaces}")
    marks = sandbox / "workspace-marks"
    notes = sorted(str(p.relative_to(marks)) for p in marks.rglob("*") if p.is_file()) \
        if marks.exists() else []
    if notes:
        out.append(f"{name} keeps workspace notes or locks {notes}")
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    mounted = [m for m in mounts if m.startswith((f"{sandbox}/", f"{workspaces}/"))]
    if mounted:
        out.append(f"{name} keeps mounts {mounted}")
    if netns is not None:
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True,
                              text=True).stdout.split()
        if pids:
            out.append(f"{name} keeps processes {pids}")
    registry = settings.sandbox.uid_registry
    held = [f"{m.name}: {m.read_text(errors='replace')}" for m in registry.iterdir()
            if m.is_file() and m.read_text(errors="replace").startswith(
                (f"{sandbox}/", f"{workspaces}/"))] if registry.exists() else []
    if held:
        out.append(f"{name} keeps session uid markers {held}")
    return out


def test_the_leftover_checks_see_what_is_planted(tmp_path: Path) -> None:
    """The checks above look where a host keeps things: a workspace, a note and a uid marker
    planted there are each reported (before, they looked under the sandbox dir only and could
    not fail)."""
    home = tmp_path / "home"
    home.mkdir()
    settings = load_settings(home=home)
    assert leftovers("h", home, None) == []
    (settings.workspaces_dir / "run-planted").mkdir(parents=True)
    (settings.sandbox_dir / "workspace-marks").mkdir(parents=True)
    (settings.sandbox_dir / "workspace-marks" / "note").write_text("session run-planted\n")
    registry = settings.sandbox.uid_registry
    registry.mkdir(parents=True, exist_ok=True)
    marker = registry / f"planted-{tmp_path.name}"
    marker.write_text(f"{settings.workspaces_dir}/run-planted\n")
    try:
        found = "\n".join(leftovers("h", home, None))
    finally:
        marker.unlink()
    assert "workspaces ['run-planted']" in found
    assert "notes or locks ['note']" in found
    assert "uid markers" in found and "run-planted" in found


PLAN = {"name": "across", "steps": [
    {"id": "s1", "tool": "bash", "code": "echo v1 > state.txt"},
    {"id": "ok1", "kind": "approval", "input": {"prompt": "go on?"}, "depends_on": ["s1"]},
    {"id": "s2", "tool": "bash", "code": "echo v2 > state.txt", "depends_on": ["ok1"]},
    {"id": "ok2", "kind": "approval", "input": {"prompt": "go on?"}, "depends_on": ["s2"]},
    {"id": "s3", "tool": "bash", "code": "cat state.txt", "depends_on": ["ok2"]},
]}


async def test_the_three_step_plan_across_hosts_prints_v2(db: Database, three: Cluster) -> None:
    key = await _key(db)
    a, b, _ = three.hosts
    for host in three.hosts:
        host.serve()
    async with _client(three.balancer, key) as api:
        run = (await api.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        a.work()
        await _wait(api, run, "WAITING")
        a.stop("worker")
        b.work()
        assert (await api.post(f"/v1/runs/{run}/steps/ok1/approve", json={})).status_code == 200
        await _wait(api, run, "WAITING")
        b.stop("worker")
        a.work()
        assert (await api.post(f"/v1/runs/{run}/steps/ok2/approve", json={})).status_code == 200
        done = await _wait(api, run, "SUCCEEDED", "FAILED", "DEAD")
        assert done["status"] == "SUCCEEDED", done
        steps = {s["step_id"]: s for s in await _steps(db, run)}
        assert steps["s3"]["stdout"] == "v2\n", steps["s3"]["stdout"]
        ran = await _workers(db, run)
        assert ran["s1"] != ran["s2"] != ran["s3"], ran  # three workers, on hosts a, b, a
        said = "\n".join(f"{d['step']} {d['kind']} {d['reason']}"
                         for d in await explain(db, uuid.UUID(run)))
        assert "s3 restore" in said and "on another host" in said, said
    await _finish(three)
    _assert_clean(three)


WIDE = {"name": "wide", "steps": [
    *({"id": f"p{n}", "tool": "bash", "code": f"sleep 0.{n % 5}; echo {n} > p{n}.txt"}
      for n in range(30)),
    {"id": "join", "tool": "bash", "code": "ls p*.txt | wc -l",
     "depends_on": [f"p{n}" for n in range(30)]},
]}


async def test_thirty_parallel_steps_over_three_hosts_all_reach_the_join(
        db: Database, three: Cluster) -> None:
    key = await _key(db)
    three.hosts[0].serve()
    async with _client(three.hosts[0].url, key) as api:
        run = (await api.post("/v1/runs", json={"plan": WIDE})).json()["run_id"]
        for host in three.hosts:
            host.work(concurrency=4)
        done = await _wait(api, run, "SUCCEEDED", "FAILED", "DEAD", timeout_s=180)
        assert done["status"] == "SUCCEEDED", done
    steps = await _steps(db, run)
    join = [s for s in steps if s["step_id"] == "join"]
    assert join[-1]["stdout"].strip() == "30"
    succeeded = Counter(s["step_id"] for s in steps if s["status"] == "SUCCESS")
    assert all(n == 1 for n in succeeded.values()) and len(succeeded) == 31
    workers = {await _host_of(db, run, s) for s in succeeded}
    assert len(workers) >= 2, f"the steps did not spread over hosts: {workers}"
    await _finish(three)
    _assert_clean(three)


async def _host_of(db: Database, run_id: str, step: str) -> str:
    row = await db.fetchone("SELECT payload ->> 'worker' AS w FROM onebox.agent_events WHERE "
                            "run_id = %s AND type = 'step_started' AND payload ->> 'step_id' = %s "
                            "ORDER BY seq DESC LIMIT 1", (run_id, step))
    return str(row["w"]) if row else ""


async def test_an_e2b_sandbox_made_through_one_server_is_used_through_the_others(
        db: Database, three: Cluster) -> None:
    from e2b import Sandbox

    key = await _key(db)
    for host in three.hosts:
        host.serve()
    urls = [h.url for h in three.hosts]

    def via(n: int) -> dict[str, str]:
        return {"api_key": key, "api_url": f"{urls[n]}/e2b", "sandbox_url": f"{urls[n]}/e2b/sandbox"}

    def flow() -> dict[str, Any]:
        made = Sandbox.create(metadata={"k": "v"}, timeout=300, **via(0))
        Sandbox.connect(made.sandbox_id, **via(1)).files.write("/home/user/x.txt", "hello")
        third = Sandbox.connect(made.sandbox_id, **via(2))
        out = third.commands.run("cat x.txt").stdout
        info = Sandbox.get_info(made.sandbox_id, **via(2))
        Sandbox.kill(made.sandbox_id, **via(1))
        return {"out": out, "metadata": info.metadata}

    got = await asyncio.to_thread(flow)
    assert got == {"out": "hello", "metadata": {"k": "v"}}
    await _finish(three)
    _assert_clean(three)


SLOW = {"name": "slow", "steps": [
    *({"id": f"q{n}", "tool": "bash", "code": f"sleep 2; echo {n} > q{n}.txt"} for n in range(9)),
    {"id": "join", "tool": "bash", "code": "ls q*.txt | wc -l",
     "depends_on": [f"q{n}" for n in range(9)]},
]}


def _sandboxed(pid: int) -> bool:
    """Whether a step's code (its ``sleep 2``) runs in a sandbox below the process."""
    for child in descendants([pid]):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "sleep":
                return True
    return False


async def test_killing_every_process_of_one_host_mid_run(db: Database, three: Cluster) -> None:
    key = await _key(db)
    victim = three.hosts[1]
    three.hosts[0].serve()
    async with _client(three.hosts[0].url, key) as api:
        run = (await api.post("/v1/runs", json={"plan": SLOW})).json()["run_id"]
        for host in three.hosts:
            host.work(concurrency=2)
        worker = victim.processes["worker"].pid
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _sandboxed(worker):
            await asyncio.sleep(0.05)  # until the victim runs a step's sandbox
        below = victim.kill_all()
        assert below, "the victim ran sandboxes when it was killed (the probe reached them)"
        await asyncio.sleep(3)
        left = [p for p in below if alive(p)]
        assert not left, f"processes outlived their killed host: {left}"
        done = await _wait(api, run, "SUCCEEDED", "FAILED", "DEAD", timeout_s=180)
        assert done["status"] == "SUCCEEDED", done
    steps = await _steps(db, run)
    assert [s["stdout"] for s in steps if s["step_id"] == "join"][-1].strip() == "9"
    succeeded = Counter(s["step_id"] for s in steps if s["status"] == "SUCCESS")
    assert len(succeeded) == 10 and all(n == 1 for n in succeeded.values()), succeeded
    await _finish(three)
    _assert_clean(three)


async def test_a_host_cut_off_past_its_lease_is_fenced_and_runs_nothing_stale(
        db: Database, three: Cluster) -> None:
    key = await _key(db)
    victim = three.hosts[2]
    three.hosts[0].serve()
    async with _client(three.hosts[0].url, key) as api:
        run = (await api.post("/v1/runs", json={"plan": SLOW})).json()["run_id"]
        victim.work(concurrency=3)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(await db.fetch("SELECT 1 FROM onebox.task_execution WHERE run_id = %s "
                                  "AND status = 'RUNNING'", (run,))) >= 3:
                break
            await asyncio.sleep(0.1)
        victim.cut_off()
        for host in three.hosts[:2]:
            host.work(concurrency=3)
        await asyncio.sleep(8)  # past the 4 s lease: the other hosts take its steps
        victim.reconnect()
        done = await _wait(api, run, "SUCCEEDED", "FAILED", "DEAD", timeout_s=180)
        assert done["status"] == "SUCCEEDED", done
    steps = await _steps(db, run)
    succeeded = Counter(s["step_id"] for s in steps if s["status"] == "SUCCESS")
    assert len(succeeded) == 10 and all(n == 1 for n in succeeded.values()), succeeded
    assert [s["stdout"] for s in steps if s["step_id"] == "join"][-1].strip() == "9"
    await _finish(three)
    _assert_clean(three)
