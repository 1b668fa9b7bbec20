"""Agent overhead per step, excluding model and sandbox time.

The agent is driven synchronously with canned model replies and canned step
results; only the time spent inside ``Agent.start()`` / ``Agent.observe()`` is
counted (planning, validation, prompt building, scheduling, expressions,
code pre-checks). Then the engine around it (bench/agent_engine.py): every agent action
a queued, claimed, archived task_execution row, on the embedded PostgreSQL and the real
sandbox, its sandbox and model time subtracted; and 4 code steps on 1 versus 2 workers.
Writes bench/results/agent.json.

Run: .venv/bin/python bench/agent.py [--repeat N] [--sizes 10,50,200] [--no-engine]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onebox.agent.actions import (
    Action,
    CallModel,
    CheckCode,
    CheckResult,
    LookupTools,
    ModelReply,
    Observation,
    StepAction,
    StepResult,
    ToolsResult,
)
from onebox.agent.loop import Agent
from onebox.agent.plan import parse_plan
from onebox.agent.state import AgentConfig
from onebox.llm.base import ChatResponse, Message, Usage

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent_engine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET_P50_MS = 5.0
INTENT = {"goal": "bench", "entities": [], "capabilities": ["python"], "formats": ["csv"],
          "risks": [], "fallbacks": []}


def reply(data: Any) -> ChatResponse:
    text = data if isinstance(data, str) else json.dumps(data)
    return ChatResponse(Message.assistant(text), "bench", Usage(100, 50), "stop")


def chain(n: int) -> dict[str, Any]:
    return {"steps": [{"id": f"s{i}", "tool": "python", "code": f"print({i})",
                       "depends_on": [f"s{i - 1}"] if i else []} for i in range(n)]}


def dag(n: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    steps = []
    for i in range(n):
        deps = sorted({f"s{rng.randrange(i)}" for _ in range(min(i, 3))}) if i else []
        step: dict[str, Any] = {"id": f"s{i}", "tool": "python", "code": f"print({i})",
                                "depends_on": deps}
        if deps and i % 5 == 0:
            step["when"] = f"{deps[0]}.ok and {deps[0]}.result.n >= 0"
        steps.append(step)
    return {"max_parallel": 8, "steps": steps}


def fanout(n: int) -> dict[str, Any]:
    return {"steps": [{"id": "list", "tool": "python", "code": "print()"},
                      {"id": "each", "tool": "python", "code": "print(item)",
                       "foreach": "list.result.items", "depends_on": ["list"]},
                      {"id": "sum", "tool": "python", "code": "print()", "depends_on": ["each"]}]}


def drive(agent: Agent, answer_model: Callable[[CallModel], ChatResponse],
          result_for: Callable[[StepAction], StepResult]) -> tuple[float, int, list[float]]:
    """Run to the end; returns (agent seconds, step executions, per-observe seconds)."""
    spent: list[float] = []
    started = time.perf_counter()
    pending: list[Action] = agent.start()
    first = time.perf_counter() - started
    executions = 0
    while pending:
        action = pending.pop(0)
        obs: Observation
        if isinstance(action, CallModel):
            obs = ModelReply(action.id, answer_model(action))
        elif isinstance(action, LookupTools):
            obs = ToolsResult(action.id)
        elif isinstance(action, CheckCode):
            obs = CheckResult(action.id, True)
        elif isinstance(action, StepAction):
            executions += 1
            obs = result_for(action)
        else:
            continue
        t0 = time.perf_counter()
        pending.extend(agent.observe(obs))
        spent.append(time.perf_counter() - t0)
    assert agent.result is not None and agent.result.ok, agent.result
    return first + sum(spent), executions, spent


def canned(items: int = 0) -> Callable[[StepAction], StepResult]:
    def result_for(action: StepAction) -> StepResult:
        result = {"n": 1, "items": list(range(items))}
        return StepResult(action.id, ok=True, exit_code=0, stdout="ok\n", result=result)
    return result_for


def scenario_plan(data: dict[str, Any], items: int = 0) -> tuple[float, int, list[float]]:
    agent = Agent(plan=parse_plan(data), config=AgentConfig(use_model=False, max_fanout=1000))
    return drive(agent, lambda a: reply({}), canned(items))


def scenario_model(n: int) -> tuple[float, int, list[float]]:
    """Request -> intent -> plan of n goal steps -> model-written code for each -> run."""
    plan = {"steps": [{"id": f"s{i}", "tool": "python", "goal": f"compute part {i}",
                       "depends_on": [f"s{i - 1}"] if i else []} for i in range(n)]}
    replies = {"intent": reply(INTENT), "plan": reply(plan)}
    code = reply({"code": "import json\nprint(json.dumps({'n': 1}))\n"})
    agent = Agent("bench the agent", config=AgentConfig())
    return drive(agent, lambda a: replies.get(a.purpose, code), canned())


def measure(name: str, run: Callable[[], tuple[float, int, list[float]]],
            repeat: int) -> dict[str, Any]:
    per_step_ms: list[float] = []
    observe_ms: list[float] = []
    for _ in range(repeat):
        total, steps, spent = run()
        per_step_ms.append(total * 1000 / steps)
        observe_ms.extend(s * 1000 for s in spent)
    observe_ms.sort()
    return {
        "scenario": name, "steps_per_run": steps, "runs": repeat,
        "per_step_ms_p50": round(statistics.median(per_step_ms), 4),
        "per_step_ms_max": round(max(per_step_ms), 4),
        "observe_ms_p50": round(statistics.median(observe_ms), 4),
        "observe_ms_p95": round(observe_ms[int(len(observe_ms) * 0.95) - 1], 4),
    }


def engine_summary(measured: dict[str, Any]) -> dict[str, Any]:
    """The engine's measurements, headed by the issue's target: per agent step, p50 of
    (queue hop + claim to perform + perform + archive), sandbox and model time excluded."""
    worst = max(r["engine_ms_p50"] for r in measured["overhead"])
    return {"benchmark": "engine overhead per agent step, queue hop included (sandbox and "
                         "model time excluded)",
            "target_engine_ms_p50": TARGET_P50_MS, "worst_engine_ms_p50": worst,
            "meets_target": worst <= TARGET_P50_MS,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--sizes", default="10,50,200",
                        help="chain lengths of the engine runs, comma-separated")
    parser.add_argument("--no-engine", action="store_true",
                        help="only the pure agent (no database, no sandbox)")
    args = parser.parse_args()
    scenarios: list[tuple[str, Callable[[], tuple[float, int, list[float]]]]] = [
        ("chain_50_plan_file", lambda: scenario_plan(chain(50))),
        ("dag_200_parallel_when", lambda: scenario_plan(dag(200), items=0)),
        ("fanout_100", lambda: scenario_plan(fanout(100), items=100)),
        ("model_written_20_steps", lambda: scenario_model(20)),
    ]
    results = [measure(name, run, args.repeat) for name, run in scenarios]
    worst = max(r["per_step_ms_p50"] for r in results)
    out = {
        "benchmark": "agent overhead per step (model and sandbox time excluded)",
        "target_per_step_ms_p50": TARGET_P50_MS, "worst_per_step_ms_p50": worst,
        "meets_target": worst <= TARGET_P50_MS, "scenarios": results,
        "python": platform.python_version(), "machine": platform.machine(),
    }
    if not args.no_engine:
        out["engine"] = engine_summary(
            agent_engine.run_engine([int(n) for n in args.sizes.split(",")]))
    path = ROOT / "bench" / "results" / "agent.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
