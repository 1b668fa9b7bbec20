"""Bounds on what a client or a model can ask for: expressions, YAML, JSON depth, limit caps, plan size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onebox.agent.expressions import ExpressionError, evaluate, referenced_names
from onebox.agent.plan import load_plan, parse_plan, topological_order
from onebox.bounds import (
    MAX_JSON_DEPTH,
    check_depth,
    json_depth,
    load_yaml,
    raw_json_too_deep,
)
from onebox.config import SandboxSettings, Settings
from onebox.errors import PlanError, PolicyViolation, ValidationError
from onebox.runtime.engine.submit import check_plan_caps
from onebox.sandbox import policy
from onebox.sandbox.base import Limits
from onebox.store.catalog import load_tool_file

# 9 levels of 9 aliases: 9**9 (387 million) leaves from under 700 bytes, inside a valid plan.
ALIAS_BOMB = "\n".join(
    ["steps:", "- id: s", "  tool: bash", "  code: 'true'", "  input:",
     '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"    {chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]"
       for i in range(8)]
)


def _chain(n: int) -> dict[str, object]:
    return {"steps": [{"id": f"s{i}", "tool": "bash", "code": "true",
                       "depends_on": [f"s{i - 1}"] if i else []} for i in range(n)]}


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


# -- the expression evaluator ------------------------------------------------------------

@pytest.mark.parametrize(("expression", "bound"), [
    ("round(1, -10000000)", "ndigits"),
    ("round(1.5, 10000000)", "ndigits"),
    ("round(1, 'x')", "ndigits"),
    (" * ".join(["big"] * 16), "bits"),
    ("sum(rows, [])", "numbers"),
    ("sum(words)", "numbers"),
])
def test_costly_expressions_are_refused_naming_the_bound(expression: str, bound: str) -> None:
    names = {"rows": [[i] for i in range(50_000)], "words": ["a", "b"], "big": 2**300}
    with pytest.raises(ExpressionError, match=bound):
        evaluate(expression, names)


def test_products_within_the_bound_still_work() -> None:
    assert evaluate("round(1234.5678, 2) + round(1234, -2)", {}) == 1234.57 + 1200
    assert evaluate("2 * 3 * x", {"x": 7}) == 42
    assert evaluate("sum(xs, 1)", {"xs": [1, 2.5]}) == 4.5


@pytest.mark.parametrize("expression", ["-" * 900 + "1", "not " * 200 + "x", "[" * 90 + "]" * 90,
                                        "x" + ".a" * 400])
def test_deep_expressions_are_refused_not_a_recursion_error(expression: str) -> None:
    with pytest.raises(ExpressionError):
        referenced_names(expression)
    with pytest.raises(ExpressionError):
        evaluate(expression, {"x": True})


# -- YAML ----------------------------------------------------------------------------------

def test_a_yaml_alias_bomb_is_refused_quickly() -> None:
    assert len(ALIAS_BOMB) < 700
    with pytest.raises(ValidationError, match="aliases expand to more than"):
        load_yaml(ALIAS_BOMB, what="plan.yaml")


def test_a_plan_file_alias_bomb_is_a_plan_error(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    with pytest.raises(PlanError, match="aliases expand"):
        load_plan(path)


def test_a_tool_file_alias_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tool.yaml"
    path.write_text("name: t\n" + ALIAS_BOMB)
    with pytest.raises(ValidationError, match="aliases expand"):
        load_tool_file(path)


def test_yaml_with_a_few_aliases_loads() -> None:
    data = load_yaml("base: &b {tool: bash, code: 'true'}\nsteps: [*b, *b]\n")
    assert data["steps"] == [{"tool": "bash", "code": "true"}] * 2


@pytest.mark.parametrize(("text", "words"), [
    ("a: &a [*a]\n", "recursive"),
    ("[" * 65 + "1" + "]" * 65, "deeper than 64"),
    ("[" * 5000 + "]" * 5000, "deeper than 64"),
    ("x: " + "y" * (1 << 20), "bytes"),
    ("a: &a " + "[" * 40 + "1" + "]" * 40 + "\nb: &b " + "[" * 40 + "*a" + "]" * 40 + "\n",
     "deeper than 64"),
])
def test_yaml_bounds(text: str, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        load_yaml(text)


def test_yaml_at_the_depth_bound_loads() -> None:
    text = "[" * MAX_JSON_DEPTH + "1" + "]" * MAX_JSON_DEPTH
    assert json_depth(load_yaml(text)) == MAX_JSON_DEPTH


# -- JSON depth ----------------------------------------------------------------------------

def test_json_depth_is_counted_without_recursion() -> None:
    assert json_depth(1) == 0 and json_depth([]) == 1 and json_depth({"a": [1, {"b": 2}]}) == 3
    assert json_depth(_nested(100_000)) == MAX_JSON_DEPTH + 1, "stops counting past the bound"
    with pytest.raises(ValidationError, match="plan is nested deeper than 64") as caught:
        check_depth({"a": _nested(65)}, field="plan")
    assert caught.value.field == "plan"
    check_depth(_nested(64), field="plan")


@pytest.mark.parametrize(("raw", "too_deep"), [
    (b"[" * 64 + b"]" * 64, False),
    (b"[" * 65 + b"]" * 65, True),
    (b'{"a": "' + b"[" * 500 + b'"}', False),
    (b'{"a": "\\"' + b"[" * 500 + b'"}', False),
    (b'[{"a": [' * 30 + b"1" + b"]}]" * 30, True),
    (b"[" + b"[]," * 10_000 + b"[]]", False),
])
def test_raw_json_depth(raw: bytes, too_deep: bool) -> None:
    assert raw_json_too_deep(raw) is too_deep


def test_deep_plans_are_plan_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="nested deeper than 64"):
        parse_plan({"steps": [{"id": "a", "tool": "bash", "code": "x", "input": {"d": _nested(500)}}]})
    path = tmp_path / "deep.json"
    path.write_text('{"steps": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(PlanError, match="nested too deeply"):
        load_plan(path)


def test_a_plan_file_over_1_mib_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (1 << 20))
    with pytest.raises(PlanError, match="the limit is 1048576 bytes"):
        load_plan(path)


# -- operator caps -------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value", "cap", "env"), [
    ("memory_mb", 4_000_000, "8192", "MAX_MEMORY_MB"),
    ("pids", 4_000_000, "4096", "MAX_PIDS"),
    ("disk_mb", 10_000_000, "16384", "MAX_DISK_MB"),
    ("timeout_s", 10 * 24 * 3600.0, "86400", "MAX_TIMEOUT_S"),
    ("max_output_bytes", 1 << 30, str(64 << 20), "MAX_OUTPUT_BYTES_CAP"),
    ("cpus", 1024.0, None, "MAX_CPUS"),
])
def test_resolve_limits_refuses_a_request_above_a_cap(
    name: str, value: float, cap: str | None, env: str
) -> None:
    with pytest.raises(PolicyViolation) as caught:
        policy.resolve_limits(SandboxSettings(), Limits(**{name: value}))
    message = caught.value.message
    assert message.startswith(f"limits.{name} {int(value)} ")
    assert f"is above the operator cap {cap or ''}" in message
    assert f"(ONEBOX_SANDBOX__{env})" in message
    assert caught.value.field == f"limits.{name}"


def test_resolve_limits_accepts_requests_up_to_the_caps() -> None:
    cfg = SandboxSettings(max_memory_mb=1024, max_cpus=2)
    limits = policy.resolve_limits(cfg, Limits(memory_mb=1024, cpus=2))
    assert (limits.memory_mb, limits.cpus) == (1024, 2)
    with pytest.raises(PolicyViolation, match=r"limits.memory_mb 1025 is above the operator cap 1024"):
        policy.resolve_limits(cfg, Limits(memory_mb=1025))


def test_the_message_is_the_documented_one() -> None:
    with pytest.raises(PolicyViolation) as caught:
        policy.resolve_limits(SandboxSettings(), Limits(memory_mb=4_000_000))
    assert caught.value.message.startswith(
        "limits.memory_mb 4000000 is above the operator cap 8192 (ONEBOX_SANDBOX__MAX_MEMORY_MB)")


def test_defaults_above_their_caps_are_a_settings_error() -> None:
    with pytest.raises(ValueError, match="sandbox.memory_mb 4096 is above the operator cap"):
        SandboxSettings(memory_mb=4096, max_memory_mb=2048)
    defaults = Settings().sandbox
    policy.resolve_limits(defaults, Limits())  # the shipped defaults are within the caps
    assert defaults.max_cpus >= 1


def test_plan_caps_name_the_step_and_the_field() -> None:
    plan = parse_plan({"steps": [{"id": "ok", "tool": "bash", "code": "x"},
                                 {"id": "big", "tool": "bash", "code": "x",
                                  "limits": {"pids": 4_000_000}}]})
    with pytest.raises(PolicyViolation) as caught:
        check_plan_caps(plan, SandboxSettings())
    assert caught.value.field == "steps[big].limits.pids"
    assert "steps[big].limits.pids 4000000 is above the operator cap 4096" in caught.value.message


# -- plan validation size ------------------------------------------------------------------

def test_a_10000_step_chain_validates_in_order() -> None:
    plan = parse_plan(_chain(10_000))
    assert plan.step_numbers()["s9999"] == 10_000
    assert topological_order(plan) == [f"s{i}" for i in range(10_000)]
    assert plan.step("s5000").depends_on == ("s4999",)


def test_a_chain_written_backwards_is_ordered_by_dependencies() -> None:
    data = _chain(20_000)
    data["steps"] = list(reversed(data["steps"]))  # type: ignore[call-overload]
    assert topological_order(parse_plan(data))[:3] == ["s0", "s1", "s2"]


def test_a_wide_dag_keeps_file_order_among_ready_steps() -> None:
    steps = [{"id": "root", "tool": "bash", "code": "x"}]
    steps += [{"id": f"w{i}", "tool": "bash", "code": "x", "depends_on": ["root"]}
              for i in range(50_000)]
    steps += [{"id": "join", "tool": "bash", "code": "x",
               "depends_on": [f"w{i}" for i in range(50_000)]}]
    order = topological_order(parse_plan({"steps": steps}))
    assert order[0] == "root" and order[-1] == "join" and order[1:4] == ["w0", "w1", "w2"]


def test_a_cycle_in_a_big_plan_is_named_briefly() -> None:
    data = _chain(10_000)
    data["steps"][0]["depends_on"] = ["s9999"]  # type: ignore[index]
    with pytest.raises(PlanError) as caught:
        parse_plan(data)
    message = caught.value.message
    assert "dependency cycle between 10000 steps s0 -> s1 -> " in message and "..." in message
    assert len(message) < 500 and caught.value.step == "s0"


def test_a_small_cycle_is_named_in_full_and_closed() -> None:
    data = _chain(5)
    data["steps"][1]["depends_on"] = ["s3"]  # type: ignore[index]
    with pytest.raises(PlanError, match=r"between 3 steps s1 -> s2 -> s3 -> s1;"):
        parse_plan(data)


def test_ready_steps_among_candidates_keep_plan_order() -> None:
    from onebox.runtime.engine.schedule import StepState, ready_steps

    data = _chain(3)
    data["steps"].append({"id": "t", "tool": "bash", "code": "x", "depends_on": ["s0"]})  # type: ignore[attr-defined]
    plan = parse_plan(data)
    done = {"s0": StepState("SUCCESS", 1, "h")}
    assert [s.id for s in ready_steps(plan, done, ["t", "s1", "ghost"])] == ["s1", "t"]
    assert [s.id for s in ready_steps(plan, done)] == ["s1", "t"]


@pytest.mark.parametrize("reply", [
    '{"steps": ' + "[" * 5000 + "]" * 5000 + "}",  # deeper than the JSON parser goes
    json.dumps({"steps": [{"id": "a", "tool": "python", "code": "1", "input": {
        "x": _nested(500)}}]}),  # parses, but deeper than a plan may be
])
async def test_a_model_plan_nested_too_deeply_is_repaired_not_a_crash(reply: str) -> None:
    from onebox.agent.actions import CallModel
    from onebox.agent.loop import Agent
    from onebox.agent.state import AgentConfig
    from onebox.testing import ScriptedModel, run_agent_offline, step_ok

    plan = {"steps": [{"id": "a", "tool": "python", "code": "print(1)"}]}
    model = ScriptedModel([{"goal": "g"}, reply, plan])
    run = await run_agent_offline(Agent("x", config=AgentConfig(lookup_tools=False)), model,
                                  lambda a: step_ok("1\n"))
    assert [a.purpose for a in run.of_type(CallModel)] == ["intent", "plan", "repair_plan"]
    assert run.result.ok and run.executed() == ["a"]
