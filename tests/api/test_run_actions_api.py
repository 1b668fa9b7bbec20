"""Approve/reject, retry from DEAD, and the warnings the run page shows."""

from __future__ import annotations

import uuid

from api_helpers import Api, wait_status

from onebox.store import runs as store

GATED = {"name": "gated", "steps": [
    {"id": "gate", "kind": "approval", "input": {"prompt": "go?"}},
    {"id": "after", "tool": "bash", "code": "echo after", "depends_on": ["gate"]},
]}
FLAKY = {"name": "flaky", "steps": [
    {"id": "f", "tool": "bash", "max_attempts": 2,
     "code": "if [ -f seen ]; then echo ok; else touch seen; exit 1; fi"},
]}


async def test_reject_fails_the_run_and_approve_after_that_is_a_conflict(api: Api) -> None:
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": GATED})).json()["run_id"]
        detail = await wait_status(c, run_id, "WAITING")
        assert detail["waiting_approvals"] == ["gate"]
        r = await c.post(f"/v1/runs/{run_id}/steps/gate/reject", json={"comment": "not today"})
        assert r.status_code == 200 and r.json()["status"] == "FAILED"
        again = await c.post(f"/v1/runs/{run_id}/steps/gate/approve")
        assert again.status_code == 409 and again.json()["field"] == "step_id"
        detail = (await c.get(f"/v1/runs/{run_id}")).json()
        gate = next(s for s in detail["steps"] if s["step_id"] == "gate")
        key_prefix = api.keys["acme"][:12]
        assert gate["decision"]["approval"] == {
            "approved": False, "by": f"acme-test (key {key_prefix})", "comment": "not today"}
        bad = await c.post(f"/v1/runs/{run_id}/steps/no such step/approve")
        assert bad.status_code == 422
        typo = await c.post(f"/v1/runs/{run_id}/steps/gaet/approve")
        assert typo.status_code == 404 and typo.json()["field"] == "step_id", typo.text
        assert "no such step 'gaet'; did you mean 'gate'?" in typo.json()["message"]
        queued = await c.post(f"/v1/runs/{run_id}/steps/after/approve")  # in the plan only
        assert queued.status_code == 409 and "is not waiting" in queued.json()["message"]


async def test_retry_a_dead_run_and_see_the_retry_warning(api: Api) -> None:
    plan = {"name": "dies", "steps": [{"id": "d", "tool": "bash", "max_attempts": 1,
                                       "code": "exit 7"}]}
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": plan})).json()["run_id"]
        await wait_status(c, run_id, "DEAD")
        r = await c.post(f"/v1/runs/{run_id}/retry")
        assert r.status_code == 200 and r.json()["queued_steps"] == ["d"]
        detail = await wait_status(c, run_id, "DEAD")
        attempts = [s for s in detail["steps"] if s["step_id"] == "d"]
        assert [s["attempt"] for s in attempts][:2] == [1, 2]
        assert all("retry" in [w["kind"] for w in a["warnings"]] for a in attempts[1:]), attempts
        assert attempts[-1]["exit_code"] == 7 and attempts[0]["warnings"] == []
        conflict = await c.post(f"/v1/runs/{(await c.post('/v1/runs', json={'plan': GATED})).json()['run_id']}/retry")
        assert conflict.status_code == 409


async def test_retried_step_and_stale_run_warnings(api: Api) -> None:
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": FLAKY})).json()["run_id"]
        detail = await wait_status(c, run_id, "SUCCEEDED")
        second = [s for s in detail["steps"] if s["attempt"] == 2][0]
        assert [w["kind"] for w in second["warnings"]] == ["retry"]
        assert detail["warnings"] == []
        gated = (await c.post("/v1/runs", json={"plan": GATED})).json()["run_id"]
        await wait_status(c, gated, "WAITING")
        async with api.rt.db.transaction() as conn:
            await store.append_event(conn, uuid.UUID(gated), "run_stale", {
                "silent_since": "2026-01-01T00:00:00+00:00"}, trace_id=None)
        stale = (await c.get(f"/v1/runs/{gated}")).json()["warnings"]
        assert [w["kind"] for w in stale] == ["stale"]
        await c.post(f"/v1/runs/{gated}/steps/gate/approve")
        assert (await c.get(f"/v1/runs/{gated}")).json()["warnings"] == []


async def test_blocked_network_is_a_visible_warning_and_a_metric(api: Api) -> None:
    code = ("import urllib.request\ntry:\n"
            "    urllib.request.urlopen('http://blocked.example.org/', timeout=5)\n"
            "except Exception as e:\n    print('refused', type(e).__name__)\n")
    plan = {"name": "egress", "steps": [{"id": "fetch", "tool": "python",
                                         "allow_domains": ["example.com"], "code": code}]}
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": plan})).json()["run_id"]
        detail = await wait_status(c, run_id, "SUCCEEDED", "DEAD")
        warnings = detail["steps"][-1]["warnings"]
        blocked = [w for w in warnings if w["kind"] == "blocked_network"]
        assert blocked and "blocked.example.org:80" in blocked[0]["message"], warnings
        assert detail["steps"][-1]["resources"]["allow_domains"] == ["example.com"]
        text = (await c.get("/metrics")).text
        assert 'onebox_blocked_network_attempts_total{tenant="acme"} 1\n' in text


INTENT = {"goal": "count lines", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
AGENT_PLAN = {"name": "agent-plan", "steps": [
    {"id": "make", "tool": "python", "code": "open('f.txt','w').write('a\\nb\\nc\\n'); print('made')"},
    {"id": "count", "tool": "bash", "code": "wc -l < f.txt", "depends_on": ["make"]},
]}


async def test_a_task_run_is_planned_by_the_agent_and_shows_its_decisions(agent_api: Api) -> None:
    agent_api.model.add(INTENT, AGENT_PLAN)
    async with agent_api.client() as c:
        r = await c.post("/v1/runs", json={"task": "count the lines of a file",
                                           "idempotency_key": "t1"})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        again = await c.post("/v1/runs", json={"task": "count the lines of a file",
                                               "idempotency_key": "t1"})
        assert again.status_code == 200 and again.json()["run_id"] == run_id
        detail = await wait_status(c, run_id, "SUCCEEDED", "FAILED", "DEAD")
        assert detail["run"]["status"] == "SUCCEEDED", detail["run"]["error"]
        assert detail["run"]["source"] == "task"
        steps = {s["step_id"]: s for s in detail["steps"]}
        assert steps["count"]["stdout"].strip() == "3"
        assert [p["version"] for p in detail["plans"]] == [1]
        assert [m["purpose"] for m in detail["model_calls"]] == ["intent", "plan"]
        assert detail["model_calls"][1]["response"] is not None
