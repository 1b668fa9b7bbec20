"""Every model call is recorded; the agent runs through the real openai client path."""

from __future__ import annotations

import uuid

import pytest
from psycopg.types.json import Jsonb

from onebox.agent.actions import CallModel, Decision
from onebox.agent.loop import Agent
from onebox.agent.state import AgentConfig
from onebox.errors import RateLimited
from onebox.llm.base import ChatRequest, Message, ModelPrice
from onebox.llm.openai import OpenAIChatModel
from onebox.model_calls import call_model
from onebox.store.db import Database
from onebox.store.llm_calls import llm_calls, llm_usage
from onebox.testing import (
    ScriptedModel,
    ScriptedOpenAIServer,
    ServerReply,
    run_agent_offline,
    step_ok,
)

PRICES = {"scripted": ModelPrice(1.0, 2.0), "kimi-test": ModelPrice(0.5, 0.5)}


async def new_run(db: Database) -> uuid.UUID:
    run_id = uuid.uuid4()
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO onebox.runs (id, trace_id, source, request) VALUES (%s, %s, 'task', %s)",
            (run_id, "0" * 32, Jsonb({"task": "t"})))
    return run_id


def action(purpose: str = "plan", step_id: str | None = None) -> CallModel:
    request = ChatRequest((Message.system("s"), Message.user("plan it")), json_output=True)
    return CallModel("a7", Decision("plan", "why"), purpose=purpose, request=request,
                     step_id=step_id)


async def test_a_model_call_is_recorded_with_tokens_latency_and_cost(db: Database) -> None:
    run_id = await new_run(db)
    model = ScriptedModel(['{"steps": []}'], model="scripted")
    reply = await call_model(db, model, action("write_code", "parse"), run_id=run_id,
                             prices={"scripted:scripted": ModelPrice(1.0, 2.0)})
    assert reply.action_id == "a7" and reply.response.content == '{"steps": []}'
    async with db.connection() as conn:
        (row,) = await llm_calls(conn, run_id)
        usage = await llm_usage(conn, run_id)
    assert (row["step_id"], row["purpose"], row["action_id"]) == ("parse", "write_code", "a7")
    assert row["model"] == "scripted:scripted"
    assert row["messages"][1] == {"role": "user", "content": "plan it"}
    assert row["request"]["json_output"] is True
    assert row["response"]["message"]["content"] == '{"steps": []}'
    assert (row["prompt_tokens"], row["completion_tokens"]) == (10, 5)
    assert float(row["cost_usd"]) == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    assert row["latency_ms"] is not None and row["error"] is None
    assert usage["calls"] == 1 and usage["prompt_tokens"] == 10 and usage["unpriced_calls"] == 0


async def test_a_failed_call_is_recorded_and_raised(db: Database) -> None:
    run_id = await new_run(db)
    model = ScriptedModel([RateLimited("slow down")])
    with pytest.raises(RateLimited):
        await call_model(db, model, action(), run_id=run_id)
    async with db.connection() as conn:
        (row,) = await llm_calls(conn, run_id)
        usage = await llm_usage(conn, run_id)
    assert row["error"] == "rate_limited: slow down" and row["response"] is None
    assert row["cost_usd"] is None and usage["calls"] == 1


async def test_agent_run_through_the_http_fake_survives_a_429(db: Database) -> None:
    run_id = await new_run(db)
    intent = {"goal": "say hi", "entities": [], "capabilities": ["python"], "formats": [],
              "risks": [], "fallbacks": []}
    plan = {"steps": [{"id": "hi", "tool": "python", "code": "print('hi')"}]}
    script = [ServerReply.error(429, retry_after=0), ServerReply.json(intent),
              ServerReply.json(plan)]
    sleeps: list[float] = []

    async def no_sleep(delay: float) -> None:
        sleeps.append(delay)

    with ScriptedOpenAIServer(script) as server:
        model = OpenAIChatModel("kimi-test", base_url=server.base_url, api_key="k",
                                sleep=no_sleep)
        agent = Agent("say hi", config=AgentConfig(lookup_tools=False))
        run = await run_agent_offline(
            agent, executor=lambda a: step_ok("hi\n"),
            call=lambda a: call_model(db, model, a, run_id=run_id, prices=PRICES),
        )
    assert run.result.ok and run.result.answer == "hi"
    assert len(server.requests) == 3 and sleeps == [0.0]
    async with db.connection() as conn:
        rows = await llm_calls(conn, run_id)
        usage = await llm_usage(conn, run_id)
    assert [r["purpose"] for r in rows] == ["intent", "plan"]
    assert all(r["prompt_tokens"] == 12 and r["model"] == "openai:kimi-test" for r in rows)
    assert usage["cost_usd"] == pytest.approx(2 * (12 + 7) * 0.5 / 1e6)
