"""What the model is shown: the traceback line, the sandbox, the files, the inputs' shape,
and each dependency once with its head and tail."""

from __future__ import annotations

from typing import Any

from onebox.agent.actions import ExecuteStep
from onebox.agent.context import SandboxFacts, failing_line, shape, summarise
from onebox.agent.loop import Agent
from onebox.testing import ScriptedModel, StepResult, run_agent_offline, step_failed, step_ok

INTENT = {"goal": "average of sales.csv", "capabilities": ["python"], "formats": ["csv"]}
TRACEBACK = ('Traceback (most recent call last):\n'
             '  File "/workspace/.onebox/step.py", line 3, in <module>\n'
             '    print(mean(rows))\n'
             '  File "/usr/lib/python3.11/statistics.py", line 328, in mean\n'
             '    raise StatisticsError("mean requires at least one data point")\n'
             'statistics.StatisticsError: mean requires at least one data point\n')
BUGGY = "import statistics\nrows = []\nprint(statistics.mean(rows))\n"


def plan(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"name": "p", "steps": list(steps)}


def prompt_of(model: ScriptedModel, n: int) -> str:
    return model.requests[n].messages[-1].content or ""


async def test_fix_prompt_has_exit_code_failing_line_and_stderr_tail() -> None:
    model = ScriptedModel([INTENT, plan({"id": "avg", "tool": "python", "goal": "the mean"}),
                           {"code": BUGGY}, {"code": "print(2)"}])
    calls = []

    def run(action: ExecuteStep) -> StepResult:
        calls.append(action)
        if len(calls) == 1:
            return step_failed(TRACEBACK, exit_code=1, error="exited with status 1")
        return step_ok("2\n")

    result = await run_agent_offline(Agent("mean"), model, run)

    fix = prompt_of(model, 3)
    assert result.result.ok
    assert "exit code 1" in fix
    assert "failing line: /workspace/.onebox/step.py, line 3: print(statistics.mean(rows))" in fix
    assert "statistics.StatisticsError: mean requires at least one data point" in fix
    assert "exited with status 1" not in fix


def test_failing_line_prefers_the_steps_own_frame_and_bounds_stderr() -> None:
    assert failing_line(TRACEBACK, BUGGY) == \
        "failing line: /workspace/.onebox/step.py, line 3: print(statistics.mean(rows))"
    assert failing_line("no traceback here", BUGGY) is None
    from onebox.agent.context import failure_text
    text = failure_text(StepResult("a1", ok=False, exit_code=2, stderr="x" * 50_000 + "END"),
                        stderr_bytes=1000)
    assert text.startswith("exit code 2") and text.endswith("END") and len(text) < 1200


async def test_code_prompt_states_python_packages_files_and_input_shapes() -> None:
    rows = [{"region": "north", "amount": 3}, {"region": "south", "amount": 5}]
    model = ScriptedModel([INTENT, plan(
        {"id": "load", "tool": "python", "code": "print(1)"},
        {"id": "avg", "tool": "python", "goal": "the mean amount", "depends_on": ["load"]}),
        {"code": "print(4)"}])
    facts = SandboxFacts("3.11.2", ("requests==2.31.0", "PyYAML==6.0"))
    agent = Agent("mean", facts=facts, files={"sales.csv": 1234})

    def run(action: ExecuteStep) -> StepResult:
        if action.instance == "load":
            return step_ok("loaded\n", result=rows, files=("rows.json",), file_bytes=(88,))
        return step_ok("4\n")

    await run_agent_offline(agent, model, run)

    write = prompt_of(model, 2)
    assert "Python 3.11.2" in write and "requests==2.31.0, PyYAML==6.0" in write
    assert "sales.csv (1234 bytes)" in write and "rows.json (88 bytes)" in write
    assert "table of 2 rows, columns ['region', 'amount']" in write


async def test_each_dependency_is_given_once_with_head_and_tail() -> None:
    big = "HEAD" + "m" * 20_000 + "TAIL"
    model = ScriptedModel([INTENT, plan(
        {"id": "load", "tool": "python", "code": "print(1)"},
        {"id": "use", "tool": "python", "goal": "use it", "depends_on": ["load"]}),
        {"code": "print(2)"}])

    def run(action: ExecuteStep) -> StepResult:
        return step_ok(big, result={"text": big}) if action.instance == "load" else step_ok("2")

    await run_agent_offline(Agent("use"), model, run)

    write = prompt_of(model, 2)
    assert write.count("HEAD") == 1 and write.count("TAIL") == 1
    assert "bytes left out" in write and len(write) < 6000


def test_shapes_and_summaries() -> None:
    assert shape({"a": 1, "b": 2}) == "object with 2 keys ['a', 'b']"
    assert shape([1, 2, "x"]) == "list of 3 items (int, str)"
    assert shape("abc") == "string of 3 characters"
    cut = summarise("a" * 100 + "b" * 100, 50)
    assert cut.startswith("a" * 25) and cut.endswith("b" * 25) and "150 bytes left out" in cut


def test_top_k_is_bounded_with_the_field_named() -> None:
    import pytest

    from onebox.agent.plan import MAX_TOP_K, parse_plan
    from onebox.errors import PlanError

    ok = parse_plan(plan({"id": "s", "kind": "knowledge_search",
                          "input": {"query": "sales", "top_k": 20}}))
    assert ok.steps[0].input["top_k"] == 20
    with pytest.raises(PlanError) as caught:
        parse_plan(plan({"id": "s", "kind": "knowledge_search",
                         "input": {"query": "sales", "top_k": MAX_TOP_K + 1}}))
    assert "steps[s].input.top_k" in caught.value.message and "1 to 50" in caught.value.message


async def test_a_rendered_top_k_past_the_bound_fails_the_step_not_the_driver() -> None:
    model = ScriptedModel([INTENT, plan(
        {"id": "n", "tool": "python", "code": "print(1)"},
        {"id": "s", "kind": "knowledge_search", "depends_on": ["n"],
         "input": {"query": "sales", "top_k": "{{ n.result }}"}})])
    from onebox.agent.state import AgentConfig

    agent = Agent("search", config=AgentConfig(max_replans=0))
    run = await run_agent_offline(agent, model, lambda a: step_ok("1", result=999))
    assert not run.result.ok and "top_k must be an integer from 1 to 50" in (run.result.error or "")
