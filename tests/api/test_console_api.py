"""The API the console acts through: usage in the runs list, a run's model calls with the
prompt and reply on demand, a YAML plan checked before it is submitted, attempt labels."""

from __future__ import annotations

import json
import uuid

from api_helpers import Api

from onebox.runtime.services.run_service import attempt_label, step_warnings

PLAN = {"name": "usage", "steps": [{"id": "a", "tool": "bash", "code": "echo a"}]}


async def add_call(api: Api, run_id: str, *, tokens: tuple[int, int], cost_usd: float | None,
                   prompt: str = "say hi") -> int:
    """A recorded model call of the run (what the model-call recorder writes)."""
    async with api.rt.db.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO onebox.llm_calls (run_id, purpose, model, messages, response,"
            " prompt_tokens, completion_tokens, latency_ms, cost_usd)"
            " VALUES (%s, 'plan', 'kimi', %s::jsonb, %s::jsonb, %s, %s, 12.5, %s) RETURNING id",
            (uuid.UUID(run_id), json.dumps([{"role": "user", "content": prompt}]),
             json.dumps({"text": "hi"}), tokens[0], tokens[1], cost_usd))
        row = await cur.fetchone()
        assert row is not None
        return int(row["id"])


async def test_runs_list_carries_duration_error_tokens_and_cost(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        await add_call(api_no_worker, run_id, tokens=(100, 20), cost_usd=0.0015)
        await add_call(api_no_worker, run_id, tokens=(50, 5), cost_usd=0.0005)
        idle = (await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        runs = {r["id"]: r for r in (await c.get("/v1/runs")).json()["runs"]}
    assert runs[run_id]["tokens"] == 175
    assert abs(runs[run_id]["cost_usd"] - 0.002) < 1e-9
    assert runs[run_id]["model_calls"] == 2
    assert runs[idle]["tokens"] == 0 and runs[idle]["cost_usd"] is None
    assert "duration_ms" in runs[idle] and runs[idle]["duration_ms"] is None  # not started
    assert "error" in runs[idle]


async def test_model_calls_list_then_prompt_and_reply_on_demand(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        call_id = await add_call(api_no_worker, run_id, tokens=(7, 3), cost_usd=None,
                                 prompt="the secret question")
        listed = (await c.get(f"/v1/runs/{run_id}/model-calls")).json()["model_calls"]
        assert [(x["id"], x["prompt_tokens"], x["cost_usd"]) for x in listed] == [(call_id, 7, None)]
        assert "messages" not in listed[0]
        one = (await c.get(f"/v1/runs/{run_id}/model-calls/{call_id}")).json()
        assert one["messages"][0]["content"] == "the secret question"
        assert one["response"] == {"text": "hi"}
        missing = await c.get(f"/v1/runs/{run_id}/model-calls/{call_id + 1000}")
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    async with api_no_worker.client("globex") as other:
        theirs = await other.get(f"/v1/runs/{run_id}/model-calls/{call_id}")
        assert theirs.status_code == 404


async def test_plan_yaml_is_parsed_or_refused_naming_the_field(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        ok = await c.post("/v1/plans/parse", json={
            "text": "name: y\nsteps:\n  - id: a\n    tool: bash\n    code: echo a\n"})
        assert ok.status_code == 200 and ok.json()["plan"]["steps"][0]["id"] == "a"
        bad_yaml = await c.post("/v1/plans/parse", json={"text": "steps: [\n"})
        assert bad_yaml.status_code == 422 and "not valid YAML" in bad_yaml.json()["message"]
        bad_step = await c.post("/v1/plans/parse", json={"text": "steps:\n  - id: a\n    bogus: 1\n"})
        assert bad_step.status_code == 422 and "steps[a]" in bad_step.json()["message"]
        scalar = await c.post("/v1/plans/parse", json={"text": "just words"})
        assert scalar.status_code == 422 and "mapping" in scalar.json()["message"]


def test_an_attempt_past_its_rows_limit_is_not_numbered_of_the_limit() -> None:
    held = {"attempt": 2, "max_attempts": 1}  # a held agent action is queued with limit 1
    assert attempt_label(held) == "2"
    assert attempt_label({"attempt": 2, "max_attempts": 3}) == "2 of 3"
    warning = step_warnings(held, {}, [])[0]["message"]
    assert "of 1" not in warning and warning.startswith("attempt 2:")
