"""The action/observation protocol: misuse is refused clearly, intent replies are repaired."""

from __future__ import annotations

from typing import Any

import pytest

from onebox.agent.actions import (
    CallModel,
    CheckResult,
    ExecuteStep,
    Finish,
    ModelReply,
    RecordIntent,
)
from onebox.agent.loop import Agent
from onebox.agent.plan import parse_plan
from onebox.agent.state import AgentConfig
from onebox.errors import AgentError
from onebox.llm.base import ChatResponse, Message
from onebox.testing import ScriptedModel, StepResult, run_agent_offline, step_ok

ONE_STEP = parse_plan({"steps": [{"id": "a", "tool": "python", "code": "print(1)"}]})


def test_an_agent_needs_a_request_or_a_plan() -> None:
    with pytest.raises(AgentError, match="request or a plan"):
        Agent()
    with pytest.raises(AgentError, match="needs a model"):
        Agent("task", config=AgentConfig(use_model=False)).start()


def test_observations_must_match_a_waiting_action() -> None:
    agent = Agent(plan=ONE_STEP)
    (_, execute) = agent.start()
    assert isinstance(execute, ExecuteStep)
    with pytest.raises(AgentError, match="'a99'"):
        agent.observe(StepResult("a99", ok=True))
    with pytest.raises(AgentError, match="needs a StepResult, got CheckResult"):
        agent.observe(CheckResult(execute.id, ok=True))
    assert agent.outstanding() == [execute]  # a refused observation loses nothing
    (finish,) = agent.observe(StepResult(execute.id, ok=True, stdout="1\n"))
    assert isinstance(finish, Finish) and agent.finished and finish.ok
    with pytest.raises(AgentError):
        agent.observe(StepResult(execute.id, ok=True))
    with pytest.raises(AgentError, match="already called"):
        agent.start()


async def test_an_unusable_intent_is_repaired_then_planning_continues() -> None:
    intent = {"goal": "g", "entities": "not a list"}
    fixed = {"goal": "g", "capabilities": ["python"]}
    plan = {"steps": [{"id": "a", "tool": "python", "code": "print(1)"}]}
    model = ScriptedModel([intent, fixed, plan])
    run = await run_agent_offline(Agent("x"), model, lambda a: step_ok("1\n"))
    assert [a.purpose for a in run.of_type(CallModel)] == ["intent", "repair_intent", "plan"]
    assert "'entities' must be a list" in (model.requests[1].messages[-1].content or '')
    assert run.of_type(RecordIntent)[0].intent.capabilities == ("python",)


async def test_model_reply_with_a_tool_call_is_accepted_as_the_plan() -> None:
    from onebox.testing import tool_call_reply

    plan = {"steps": [{"id": "a", "tool": "python", "code": "print(1)"}]}
    model = ScriptedModel([{"goal": "g"}, tool_call_reply("submit_plan", plan)])
    run = await run_agent_offline(Agent("x", config=AgentConfig(lookup_tools=False)), model,
                                  lambda a: step_ok("1\n"))
    assert run.result.ok and run.executed() == ["a"]


def test_with_no_repairs_allowed_an_unusable_intent_fails_the_run() -> None:
    agent = Agent("x", config=AgentConfig(max_plan_repairs=0, lookup_tools=False))
    (call,) = agent.start()
    assert isinstance(call, CallModel)
    (finish,) = agent.observe(ModelReply(call.id, ChatResponse(Message.assistant("?"), "m")))
    assert isinstance(finish, Finish) and not finish.ok and "intent reply was still unusable" in (finish.error or "")


async def test_a_condition_that_cannot_be_evaluated_fails_or_replans_instead_of_hanging() -> None:
    steps: list[dict[str, Any]] = [{"id": "a", "tool": "python", "code": "print(1)"},
             {"id": "b", "tool": "python", "code": "print(2)", "depends_on": ["a"],
              "when": "a.result.count > 1"}]
    plain = Agent(plan=parse_plan({"steps": steps}), config=AgentConfig(use_model=False))
    run = await run_agent_offline(plain, None, lambda a: step_ok("1\n"))  # result is None
    assert not run.result.ok
    assert "steps[b]" not in (run.result.error or "") and "'b'" in (run.result.error or "")
    assert "NoneType" in (run.result.error or "")

    fixed = {"steps": [steps[0], {**steps[1], "when": "a.ok"}]}
    model = ScriptedModel([fixed])
    run = await run_agent_offline(Agent(plan=parse_plan({"steps": steps})), model,
                                  lambda a: step_ok("1\n"))
    assert run.result.ok and [a.purpose for a in run.of_type(CallModel)] == ["replan"]
    assert run.executed() == ["a", "b"]
