"""Scripted end-to-end scenarios of the agent, driven in memory (no database, no sandbox)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from onebox.agent.actions import (
    CallModel,
    CheckCode,
    ExecuteStep,
    Finish,
    LookupTools,
    ModelReply,
    Observation,
    RecordIntent,
    RecordPlan,
    SkipStep,
    ToolHint,
    ToolsResult,
    observation_from_dict,
)
from onebox.agent.loop import Agent
from onebox.agent.plan import parse_plan
from onebox.agent.state import AgentConfig
from onebox.errors import AgentError
from onebox.llm.base import ChatResponse, Message
from onebox.testing import ScriptedModel, StepResult, run_agent_offline, step_failed, step_ok

INTENT = {"goal": "summarise sales.csv", "entities": ["sales.csv"], "capabilities": ["python"],
          "formats": ["csv"], "risks": ["file missing"], "fallbacks": ["ask the user"]}


def py(id: str, code: str = "print(1)", *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": id, "tool": "python", "code": code, "depends_on": list(deps), **extra}


def plan(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "scripted", "steps": list(steps), **extra}


def by_step(action: ExecuteStep) -> StepResult:
    """An executor that prints the step id and returns {"step": id} as the declared result."""
    return step_ok(stdout=f"{action.instance}\n", result={"step": action.instance})


def prompt_of(model: ScriptedModel, n: int) -> str:
    """The last message of the model's request number ``n``."""
    return model.requests[n].messages[-1].content or ""


def model_calls(run: Any) -> list[str]:
    return [a.purpose for a in run.of_type(CallModel)]


async def test_data_task_with_two_parallel_branches() -> None:
    model = ScriptedModel([INTENT, plan(
        py("load", "print(3)"),
        py("mean", "print('m')", "load"),
        py("median", "print('d')", "load"),
        {"id": "report", "kind": "final", "depends_on": ["mean", "median"],
         "input": {"answer": "mean={{ mean.result.step }} median={{ median.result.step }}"}},
    )])
    tools = [ToolHint("python", "run Python", "LOW", 0.97, 120)]
    run = await run_agent_offline(Agent("summarise sales.csv"), model, by_step, tools=tools)

    assert run.result.ok and run.result.answer == "mean=mean median=median"
    assert model_calls(run) == ["intent", "plan"]
    assert run.of_type(RecordIntent)[0].intent.goal == "summarise sales.csv"
    assert run.of_type(LookupTools)[0].formats == ("csv",)
    assert "python (LOW, 97% of 120 runs)" in prompt_of(model, 1)
    branches = [b for b in run.batches if any(isinstance(a, ExecuteStep) for a in b)]
    assert [sorted(a.instance for a in b if isinstance(a, ExecuteStep)) for b in branches] \
        == [["load"], ["mean", "median"]]
    mean = next(a for a in run.of_type(ExecuteStep) if a.instance == "mean")
    assert mean.inputs["deps"]["load"]["stdout"] == "load\n"
    assert mean.decision.kind == "run" and "load succeeded" in mean.decision.reason
    assert run.result.decision.kind == "finish"


async def test_failing_code_step_is_fixed_on_the_second_attempt() -> None:
    model = ScriptedModel([
        INTENT,
        plan({"id": "parse", "tool": "python", "goal": "parse sales.csv and print the total"}),
        {"code": "import csv\nprint(totl)"},
        {"code": "import csv\nprint(total)"},
    ])

    def run_code(action: ExecuteStep) -> StepResult:
        if "totl" in (action.step.code or ""):
            return step_failed("NameError: name 'totl' is not defined")
        return step_ok("42\n")

    run = await run_agent_offline(Agent("total of sales.csv"), model, run_code)
    assert run.result.ok and run.result.answer == "42"
    assert model_calls(run) == ["intent", "plan", "write_code", "fix_code"]
    fix_prompt = prompt_of(model, 3)
    assert "NameError" in fix_prompt and "print(totl)" in fix_prompt
    attempts = run.of_type(ExecuteStep)
    assert [(a.instance, a.attempt) for a in attempts] == [("parse", 1), ("parse", 2)]
    assert attempts[1].decision.kind == "retry"
    kinds = [d.kind for d in run.decisions("parse")]
    assert kinds == ["write", "run", "fix", "retry"]


async def test_step_that_keeps_failing_is_replaced_by_a_replan() -> None:
    v1 = plan(py("setup", "print('ok')"), py("fetch", "fetch()", "setup", max_attempts=2),
              py("report", "print('r')", "fetch"))
    v2 = plan(py("setup", "print('CHANGED')"),
              py("fetch_mirror", "from_mirror()", "setup"),
              py("report", "print('r2')", "fetch_mirror"))
    model = ScriptedModel([INTENT, v1, {"code": "fetch(retry=True)"}, v2])

    def run_code(action: ExecuteStep) -> StepResult:
        return step_failed("ConnectionError") if action.step_id == "fetch" else by_step(action)

    run = await run_agent_offline(Agent("fetch and report"), model, run_code)
    assert run.result.ok
    assert model_calls(run) == ["intent", "plan", "fix_code", "replan"]
    assert run.executed() == ["setup", "fetch", "fetch", "fetch_mirror", "report"]
    plans = run.of_type(RecordPlan)
    assert [p.version for p in plans] == [1, 2]
    assert plans[1].plan.step("setup").code == "print('ok')"  # finished step kept verbatim
    changes = {(d.kind, d.step_id) for d in plans[1].changes}
    assert {("replace", "fetch"), ("insert", "fetch_mirror"), ("change", "report"),
            ("keep", "setup")} <= changes
    assert "ConnectionError" in prompt_of(model, 3)
    assert plans[1].decision.kind == "replan"


async def test_replans_are_bounded() -> None:
    failing = plan(py("x", "boom()", max_attempts=1))
    model = ScriptedModel([failing])
    agent = Agent(plan=parse_plan(failing), config=AgentConfig(max_replans=1))
    run = await run_agent_offline(agent, model, lambda a: step_failed("boom"))
    assert not run.result.ok and "no replans left" in (run.result.error or "")
    assert model_calls(run) == ["replan"]
    with pytest.raises(AgentError, match="boom"):
        run.result.raise_for_error()


async def test_false_condition_skips_the_step_and_its_dependents() -> None:
    p = plan(py("count", "print(3)"),
             py("big", "print('big')", "count", when="count.result.n > 10"),
             py("after_big", "print(1)", "big"),
             py("join", "print('j')", "big", "count", when="big is None"))
    agent = Agent(plan=parse_plan(p), config=AgentConfig(use_model=False))
    run = await run_agent_offline(agent, None, lambda a: step_ok(result={"n": 3}))
    skips = {s.step_id: s.decision.reason for s in run.of_type(SkipStep)}
    assert skips == {"big": "condition 'count.result.n > 10' is false",
                     "after_big": "dependency 'big' was skipped and the step has no 'when' "
                                  "condition"}
    assert run.executed() == ["count", "join"]
    assert run.result.ok and "2 skipped" in run.result.decision.reason


async def test_fan_out_over_a_list_output_respects_max_parallel() -> None:
    p = plan(py("files", "print('ls')"),
             py("count", "print(len(open(item).read()))", "files", foreach="files.result"),
             py("total", "print('sum')", "count"), max_parallel=2)
    results = {"files": ["a.txt", "b.txt", "c.txt"]}

    def run_code(action: ExecuteStep) -> StepResult:
        if action.step_id == "count":
            return step_ok(result=len(action.inputs["item"]) * 10 + action.inputs["index"])
        return step_ok(result=results.get(action.step_id))

    run = await run_agent_offline(Agent(plan=parse_plan(p)), ScriptedModel(), run_code)
    fanned = [a for a in run.of_type(ExecuteStep) if a.step_id == "count"]
    assert [a.instance for a in fanned] == ["count[0]", "count[1]", "count[2]"]
    assert [a.inputs["item"] for a in fanned] == results["files"]
    assert max(sum(isinstance(a, ExecuteStep) for a in b) for b in run.batches) == 2
    total = next(a for a in run.of_type(ExecuteStep) if a.step_id == "total")
    assert total.inputs["deps"]["count"]["result"] == [50, 51, 52]
    assert "item 2 of 3" in fanned[1].decision.reason


async def test_invalid_plan_json_is_repaired() -> None:
    good = plan(py("only", "print('fine')"))
    cyclic = plan(py("a", "1", "b"), py("b", "1", "a"))
    model = ScriptedModel([INTENT, "here is the plan: {steps: [oops", cyclic, good])
    run = await run_agent_offline(Agent("anything"), model, by_step)
    assert run.result.ok
    assert model_calls(run) == ["intent", "plan", "repair_plan", "repair_plan"]
    first_repair = prompt_of(model, 2)
    assert "not valid JSON" in first_repair
    assert "cycle" in prompt_of(model, 3)
    assert [d.kind for d in run.agent.decisions[:6]].count("repair") == 2


async def test_plan_repairs_are_bounded_with_a_clear_error() -> None:
    model = ScriptedModel([INTENT, "nope", "still nope", "nope again"])
    run = await run_agent_offline(Agent("x", config=AgentConfig(max_plan_repairs=2)), model)
    assert not run.result.ok
    assert "plan reply was still unusable after 2 repairs" in (run.result.error or "")
    assert model.remaining == 0


async def test_python_syntax_error_is_fixed_before_running() -> None:
    model = ScriptedModel([{"code": "print('unclosed"}, {"code": "print('closed')"}])
    p = plan({"id": "w", "tool": "python", "goal": "print a word"})
    run = await run_agent_offline(Agent(plan=parse_plan(p)), model, by_step)
    assert run.executed() == ["w"]  # the broken code never ran
    assert run.of_type(ExecuteStep)[0].step.code == "print('closed')"
    assert "SyntaxError" in prompt_of(model, 1)


async def test_bash_code_is_checked_with_bash_n() -> None:
    model = ScriptedModel(["```bash\nif then fi\n```", {"code": "echo fixed"}])
    p = plan({"id": "sh", "tool": "bash", "goal": "echo a word"})
    run = await run_agent_offline(Agent(plan=parse_plan(p)), model, by_step)
    checks = run.of_type(CheckCode)
    assert [c.code for c in checks] == ["if then fi\n", "echo fixed"]
    assert checks[0].argv("/x.sh") == ("bash", "-n", "/x.sh")
    assert run.executed() == ["sh"] and run.result.ok


async def test_until_repeats_a_step_until_its_condition_holds() -> None:
    p = plan(py("poll", "check()", until="poll.result.ready or iteration >= 5",
                max_iterations=5))
    seen: list[int] = []

    def run_code(action: ExecuteStep) -> StepResult:
        seen.append(action.attempt)
        return step_ok(result={"ready": action.attempt == 3})

    run = await run_agent_offline(Agent(plan=parse_plan(p)), ScriptedModel(), run_code)
    assert seen == [1, 2, 3] and run.result.ok
    assert [d.kind for d in run.decisions("poll")] == ["run", "iterate", "iterate"]


async def test_a_step_can_ask_for_a_new_plan() -> None:
    v1 = plan(py("probe", "print(1)"), py("next", "print(2)", "probe"))
    v2 = plan(py("probe", "print(1)"), py("other", "print(3)", "probe"))
    model = ScriptedModel([v2])

    def run_code(action: ExecuteStep) -> StepResult:
        if action.step_id == "probe":
            return step_ok(result={"replan": "the data is JSON, not CSV"})
        return by_step(action)

    run = await run_agent_offline(Agent(plan=parse_plan(v1)), model, run_code)
    assert run.executed() == ["probe", "other"]
    assert "the data is JSON, not CSV" in run.of_type(RecordPlan)[1].reason


async def test_refused_approval_fails_the_run_without_replanning() -> None:
    p = plan({"id": "ok", "kind": "approval", "input": {"prompt": "delete it?"}},
             py("delete", "rm()", "ok"))
    run = await run_agent_offline(Agent(plan=parse_plan(p)), ScriptedModel(), by_step,
                                  approve=lambda a: False)
    assert not run.result.ok and "approval was refused" in (run.result.error or "")
    assert run.executed() == []


async def test_knowledge_and_memory_steps_render_templates() -> None:
    p = plan({"id": "kb", "kind": "knowledge_search", "input": {"query": "refund policy"}},
             {"id": "note", "kind": "memory_remember", "depends_on": ["kb"],
              "input": {"text": "policy says {{ kb.result[0] }}"}},
             {"id": "back", "kind": "memory_recall", "depends_on": ["note"],
              "input": {"query": "policy"}},
             {"id": "end", "kind": "final", "depends_on": ["back"],
              "input": {"answer": "{{ back.result[0] }}"}})
    run = await run_agent_offline(Agent(plan=parse_plan(p)), ScriptedModel(),
                                  knowledge=lambda a: [f"30 days ({a.query})"])
    assert run.result.answer == "policy says 30 days (refund policy)"


async def test_every_action_and_observation_serialises_to_json() -> None:
    model = ScriptedModel([INTENT, plan(py("a", "print(1)"), {"id": "sh", "tool": "bash",
                                                               "code": "echo", "depends_on": ["a"]})])
    run = await run_agent_offline(Agent("x"), model, by_step)
    for action in run.actions:
        assert json.loads(json.dumps(action.to_dict()))["type"] == action.type
    for obs in run.observations:
        assert observation_from_dict(json.loads(json.dumps(obs.to_dict()))) == obs


async def test_resume_replays_observations_without_calling_the_model_again() -> None:
    script = [INTENT, plan({"id": "w", "tool": "python", "goal": "write"},
                           py("x", "print(2)", "w")), {"code": "print(1)"}]
    model = ScriptedModel(script)
    first = Agent("resume me")
    stored: list[Observation] = []
    pending = first.start()
    while pending:  # drive by hand until step "w" has run, then stop as if the worker died
        action = pending.pop(0)
        if isinstance(action, CallModel):
            obs: Observation = ModelReply(action.id, await model.complete(action.request))
        elif isinstance(action, LookupTools):
            obs = ToolsResult(action.id)
        elif isinstance(action, ExecuteStep) and action.step_id == "w":
            obs = dataclasses.replace(step_ok("1\n"), action_id=action.id)
        else:
            continue
        stored.append(observation_from_dict(json.loads(json.dumps(obs.to_dict()))))
        pending.extend(first.observe(obs))
    assert model.remaining == 0

    second = Agent("resume me")  # another worker: replays the stored observations
    (todo,) = second.resume(stored)
    assert [a.to_dict() for a in second.history] == [a.to_dict() for a in first.history]
    assert isinstance(todo, ExecuteStep) and todo.step_id == "x"
    assert [a.id for a in first.outstanding()] == [todo.id]
    done = second.observe(StepResult(todo.id, ok=True, stdout="2\n"))
    assert isinstance(done[-1], Finish) and done[-1].ok and done[-1].answer == "2"


async def test_explain_lines_show_why_each_step_ran_or_was_skipped() -> None:
    from onebox.agent.explain import explain_lines

    p = plan(py("count", "print(3)"), py("big", "print(1)", "count", when="count.ok == False"))
    run = await run_agent_offline(Agent(plan=parse_plan(p)), ScriptedModel(), by_step)
    lines = explain_lines(json.loads(json.dumps([a.to_dict() for a in run.actions])))
    assert lines[0].startswith("-      plan    plan v1")
    assert lines[1] == "count  run     no dependencies"
    assert lines[2] == "big    skip    condition 'count.ok == False' is false"
    assert lines[-1].startswith("-      finish  all 2 steps")


async def test_fan_out_of_a_goal_step_asks_for_the_code_once() -> None:
    p = plan(py("files", "print()"),
             {"id": "each", "tool": "python", "goal": "count the lines of the file item",
              "foreach": "files.result", "depends_on": ["files"]}, max_parallel=2)
    model = ScriptedModel([{"code": "import json, os\nprint(1)"}])

    def run_code(action: ExecuteStep) -> StepResult:
        return step_ok(result=["a", "b", "c"]) if action.step_id == "files" else by_step(action)

    run = await run_agent_offline(Agent(plan=parse_plan(p)), model, run_code)
    assert run.result.ok and model_calls(run) == ["write_code"]
    prompt = prompt_of(model, 0)
    assert "item (for example; the code runs once per element of files.result) = a" in prompt
    each = [a for a in run.of_type(ExecuteStep) if a.step_id == "each"]
    assert [a.instance for a in each] == ["each[0]", "each[1]", "each[2]"]
    assert {a.step.code for a in each} == {"import json, os\nprint(1)"}


async def test_a_failure_waits_for_steps_in_flight_before_replanning() -> None:
    v1 = plan(py("slow", "print(1)"), py("bad", "x()", max_attempts=1),
              py("after_slow", "print(2)", "slow"))
    v2 = plan(py("slow", "print(1)"), py("good", "y()"), py("after_slow", "print(2)", "slow"))
    agent = Agent(plan=parse_plan(v1))
    first = agent.start()
    slow, bad = [a for a in first if isinstance(a, ExecuteStep)]
    assert agent.observe(StepResult(bad.id, ok=False, exit_code=1, stderr="boom")) == []
    # "slow" is still running: no replan yet; once it succeeds the replan is asked for,
    # and "after_slow" is not started under the old plan
    then = agent.observe(StepResult(slow.id, ok=True, stdout="1\n"))
    (call,) = then
    assert isinstance(call, CallModel) and call.purpose == "replan"
    reply = ChatResponse(Message.assistant(json.dumps(v2)), "m")
    after = agent.observe(ModelReply(call.id, reply))
    assert [getattr(a, "instance", a.type) for a in after] == ["record_plan", "good",
                                                                 "after_slow"]


async def test_a_catalog_tool_step_is_executed_with_rendered_arguments() -> None:
    p = plan(py("find", "print()"),
             {"id": "tables", "kind": "tool", "depends_on": ["find"],
              "input": {"name": "pdf_tables", "path": "{{ find.result.path }}"}})

    def run_code(action: ExecuteStep) -> StepResult:
        return step_ok(result={"path": "q3.pdf"}) if action.step_id == "find" else by_step(action)

    run = await run_agent_offline(Agent(plan=parse_plan(p)), ScriptedModel(), run_code)
    tables = run.of_type(ExecuteStep)[1]
    assert tables.step.kind == "tool"
    assert tables.step.input == {"name": "pdf_tables", "path": "q3.pdf"}
