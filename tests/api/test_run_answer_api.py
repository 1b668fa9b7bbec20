"""A run's answer over HTTP (issue 14 point 1): GET /v1/runs/{id} carries run.answer, the
run list a preview of it; a plan run without a final step answers null."""

from __future__ import annotations

from api_helpers import Api, wait_status

INTENT = {"goal": "count lines", "entities": [], "capabilities": ["bash"], "formats": [],
          "risks": [], "fallbacks": []}
AGENT_PLAN = {"name": "lines", "steps": [
    {"id": "count", "tool": "bash", "code": "printf 'a\\nb\\nc\\n' | wc -l"}]}
PLAIN = {"name": "plain", "steps": [{"id": "hi", "tool": "bash", "code": "echo hi"}]}


async def test_a_task_runs_answer_is_in_the_run_and_the_list(agent_api: Api) -> None:
    agent_api.model.add(INTENT, AGENT_PLAN)
    async with agent_api.client() as c:
        r = await c.post("/v1/runs", json={"task": "count the lines"})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        detail = await wait_status(c, run_id, "SUCCEEDED", "FAILED", "DEAD")
        assert detail["run"]["status"] == "SUCCEEDED", detail["run"]["error"]
        assert detail["run"]["answer"] == "3"
        listed = (await c.get("/v1/runs")).json()["runs"]
        assert [r["answer_preview"] for r in listed if r["id"] == run_id] == ["3"]


async def test_a_plan_run_without_a_final_step_answers_null(api: Api) -> None:
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": PLAIN})).json()["run_id"]
        detail = await wait_status(c, run_id, "SUCCEEDED", "FAILED", "DEAD")
        assert detail["run"]["status"] == "SUCCEEDED"
        assert detail["run"]["answer"] is None
        listed = (await c.get("/v1/runs")).json()["runs"]
        assert [r["answer_preview"] for r in listed if r["id"] == run_id] == [None]
