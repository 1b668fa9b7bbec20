"""One tenant's heaviest requests never freeze the API server for the others.

`compare` of two runs whose steps printed 10,000 differing lines each, `replay` of a run,
uploads and knowledge searches, in a loop from one tenant, while another client asks
`/healthz`: before, two such outputs blocked `/healthz` 4.5 s (the whole diff was computed
on the event loop and cut to size afterwards) and a replay held the server 1.2-3.9 s. The
diffs are bounded before they are computed, in linear time, and computed off the loop; a
replay is a run the workers execute.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx
from api_helpers import Api, wait_status

from onebox.runtime.services.run_compare import MAX_TEXT_DIFF_CHARS, text_diff

# 10,000 lines, every other one differing between the two runs: the worst case of a
# quadratic matcher, and the output of a loop that prints an index and a value
LINES_A = "python3 -c \"[print(i, i * 7 % 13) for i in range(10000)]\""
LINES_B = "python3 -c \"[print(i, i * 7 % 13 if i % 2 else -i) for i in range(10000)]\""


def _plan(code: str) -> dict:
    return {"name": "wide", "steps": [
        {"id": "a", "tool": "bash", "code": code},
        {"id": "b", "tool": "bash", "code": "echo done > done.txt", "depends_on": ["a"]}]}


async def test_compare_replay_and_uploads_in_a_loop_leave_healthz_quick(api: Api) -> None:
    async with api.client() as c:
        one = (await c.post("/v1/runs", json={"plan": _plan(LINES_A)})).json()["run_id"]
        two = (await c.post("/v1/runs", json={"plan": _plan(LINES_B)})).json()["run_id"]
        for run_id in (one, two):
            await wait_status(c, run_id, "SUCCEEDED")
        warm = await c.post("/v1/knowledge/search", json={"query": "warm the model up"})
        assert warm.status_code == 200, warm.text
        compared = await c.get(f"/v1/runs/{one}/compare/{two}")
        step_a = next(s for s in compared.json()["steps"] if s["step_id"] == "a")
        assert not step_a["same"] and step_a["stdout"]["cut"], "the probe must reach the diff"

    stop = asyncio.Event()

    async def heavy() -> int:
        done = 0
        async with api.client() as c:
            while not stop.is_set():
                answers = await asyncio.gather(
                    *(c.get(f"/v1/runs/{one}/compare/{two}") for _ in range(3)),
                    c.post(f"/v1/runs/{one}/replay"),
                    c.post("/v1/uploads", files={"files": ("big.txt", b"x\n" * 2_000_000)}),
                    c.post("/v1/knowledge/search", json={
                        "query": "which region sold the most in the second quarter " * 8}))
                assert all(a.status_code < 300 for a in answers), \
                    [a.text[:300] for a in answers if a.status_code >= 300]
                done += 1
        return done

    def probe() -> list[float]:
        """From another thread (its own client, not this event loop's timers): what an
        outside caller waits, including while the server's loop is busy."""
        waits = []
        with httpx.Client(base_url=api.url, timeout=60) as anon:
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline:
                started = time.perf_counter()
                assert anon.get("/healthz").status_code == 200
                waits.append(time.perf_counter() - started)
                time.sleep(0.02)
        return waits

    async def probed() -> list[float]:
        try:
            return await asyncio.to_thread(probe)
        finally:
            stop.set()

    rounds, waits = await asyncio.gather(heavy(), probed())
    assert rounds >= 1
    waits.sort()
    p99 = waits[int(len(waits) * 0.99) - 1]
    assert p99 < 0.1, (f"/healthz p99 {p99 * 1000:.0f} ms, max {waits[-1] * 1000:.0f} ms, "
                       f"median {statistics.median(waits) * 1000:.0f} ms over {len(waits)} "
                       f"probes and {rounds} rounds of heavy requests")


def test_a_diff_of_long_texts_is_bounded_before_it_is_computed() -> None:
    """Linear in the texts' length: 20,000 lines, every other one differing, come back at
    once (the quadratic matcher took 20 s), cut, and saying so."""
    a = "".join(f"{i} {i * 7 % 13}\n" for i in range(20_000))
    b = "".join(f"{i} {i * 7 % 13 if i % 2 else -i}\n" for i in range(20_000))
    started = time.perf_counter()
    out = text_diff(a, b, "stdout")
    took = time.perf_counter() - started
    assert out["cut"] and not out["same"] and len(out["diff"]) <= MAX_TEXT_DIFF_CHARS
    assert out["diff"].startswith("--- a/stdout\n+++ b/stdout\n@@ -1"), out["diff"][:200]
    assert took < 5, took  # a guard against the quadratic path, not a speed target


def test_a_bounded_diff_is_a_true_unified_diff_of_what_it_shows() -> None:
    """Lines kept alike around the change, right line numbers after a long common head."""
    head = "".join(f"same {i}\n" for i in range(5000))
    out = text_diff(head + "old\ntail\n", head + "new\ntail\n", "f")
    assert out == {"same": False, "cut": False, "diff": (
        "--- a/f\n+++ b/f\n@@ -4998,5 +4998,5 @@\n same 4997\n same 4998\n same 4999\n"
        "-old\n+new\n tail\n")}
    assert text_diff("x\n", "x\n", "f") == {"same": True, "diff": "", "cut": False}
    assert text_diff(None, "a\n", "f")["diff"] == "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+a\n"


async def test_replays_run_on_workers_within_the_tenants_session_share(api: Api) -> None:
    """A replay runs sandboxes: with a share of 3 live sessions, six concurrent replays of
    one tenant ran in six sandboxes, in the API server. Now each is a run the workers
    execute, and each re-executed step holds a slot of the share while its sandbox runs:
    with a share of 2, never more than 2 at once, and every replay still ends (queued work
    waits for a slot; it is never refused)."""
    api.rt.backend.settings.sandbox.max_sessions_per_tenant = 2  # type: ignore[attr-defined]
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": {"name": "slow", "steps": [
            {"id": "s", "tool": "bash", "code": "sleep 1; echo slept"}]}})).json()["run_id"]
        await wait_status(c, run_id, "SUCCEEDED")
        held: list[int] = []
        done = asyncio.Event()

        async def watch() -> None:
            while not done.is_set():
                rows = await api.rt.db.fetch(
                    "SELECT count(*) AS n FROM onebox.sessions WHERE tenant_id = 'acme' "
                    "AND status = 'ACTIVE' AND id LIKE 'replay-%%'", {})
                held.append(rows[0]["n"])
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        answers = await asyncio.gather(*(c.post(f"/v1/runs/{run_id}/replay") for _ in range(6)))
        done.set()
        await watcher
        assert [a.status_code for a in answers] == [200] * 6, [a.text[:300] for a in answers]
        reports = [a.json() for a in answers]
        assert all(r["status"] == "SUCCEEDED" and r["matches"] == 1 for r in reports), reports
        assert max(held) == 2, f"slots held at once: {sorted(set(held))}"
        assert held[-1] == 0 or (await api.rt.db.fetch(
            "SELECT count(*) AS n FROM onebox.sessions WHERE id LIKE 'replay-%%' "
            "AND status = 'ACTIVE'", {}))[0]["n"] == 0, "a finished replay gives its slot back"
        started = await api.rt.db.fetch(
            "SELECT payload ->> 'worker' AS worker FROM onebox.agent_events "
            "WHERE run_id = %(id)s AND type = 'step_started'",
            {"id": reports[0]["replay_run_id"]})
        assert started and all(r["worker"] for r in started), "a worker ran the step"
