"""Plan validation and ordering time by plan size, and the cost of the request bounds.

For chains (each step depends on the previous one) and wide DAGs (a root, N parallel
steps, a join that depends on all of them) of 1,000 / 10,000 / 50,000 steps: the time
of ``parse_plan`` (schema, graph, expressions, topological order) and of
``PlanIndex.of`` (what a worker computes once per plan version). Then the bounds
themselves: refusing a YAML alias bomb, and the raw JSON depth check of a 1 MiB body.
Writes bench/results/plans.json.

Run: .venv/bin/python bench/plans.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.bounds import load_yaml, raw_json_too_deep
from onebox.errors import ValidationError
from onebox.runtime.schedule import PlanIndex

ROOT = Path(__file__).resolve().parents[1]
TARGET_10K_CHAIN_S = 1.0
SIZES = (1_000, 10_000, 50_000)
ALIAS_BOMB = "\n".join(
    ["steps:", "- id: s", "  tool: bash", "  code: 'true'", "  input:",
     '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"    {chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]"
       for i in range(8)]
)


def chain(n: int) -> dict[str, Any]:
    return {"steps": [{"id": f"s{i}", "tool": "bash", "code": "true",
                       "depends_on": [f"s{i - 1}"] if i else []} for i in range(n)]}


def wide(n: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"id": "root", "tool": "bash", "code": "true"}]
    steps += [{"id": f"w{i}", "tool": "bash", "code": "true", "depends_on": ["root"]}
              for i in range(n - 2)]
    steps.append({"id": "join", "tool": "bash", "code": "true",
                  "depends_on": [f"w{i}" for i in range(n - 2)]})
    return {"steps": steps}


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def plan_case(shape: str, data: dict[str, Any], repeat: int) -> dict[str, Any]:
    plan = parse_plan(data)
    validate = timed(lambda: parse_plan(data), repeat)
    index = timed(lambda: PlanIndex.of(plan), repeat)
    return {"shape": shape, "steps": len(plan.steps), "runs": repeat,
            "validate_s_p50": round(statistics.median(validate), 4),
            "validate_s_max": round(max(validate), 4),
            "index_s_p50": round(statistics.median(index), 4)}


def refuse_bomb() -> None:
    try:
        load_yaml(ALIAS_BOMB)
    except ValidationError:
        return
    raise AssertionError("the alias bomb was accepted")


def bounds_cases(repeat: int) -> list[dict[str, Any]]:
    body = json.dumps({"plan": chain(8_000)}).encode()[: 1 << 20]
    worst = b"[" * (1 << 20)
    return [
        {"case": "yaml_alias_bomb_refused", "bytes": len(ALIAS_BOMB),
         "s_p50": round(statistics.median(timed(refuse_bomb, repeat)), 5)},
        {"case": "raw_json_depth_check_plan_body", "bytes": len(body),
         "s_p50": round(statistics.median(timed(lambda: raw_json_too_deep(body), repeat)), 5)},
        {"case": "raw_json_depth_check_1mib_of_brackets", "bytes": len(worst),
         "s_p50": round(statistics.median(timed(lambda: raw_json_too_deep(worst), repeat)), 5)},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    plans = [plan_case(shape, make(n), args.repeat)
             for shape, make in (("chain", chain), ("wide", wide)) for n in SIZES]
    chain_10k = next(p for p in plans if p["shape"] == "chain" and p["steps"] == 10_000)
    out = {
        "benchmark": "plan validation and ordering by size; cost of the request bounds",
        "target_10k_chain_validate_s": TARGET_10K_CHAIN_S,
        "chain_10k_validate_s_p50": chain_10k["validate_s_p50"],
        "meets_target": chain_10k["validate_s_max"] < TARGET_10K_CHAIN_S,
        "plans": plans, "bounds": bounds_cases(args.repeat),
        "python": platform.python_version(), "machine": platform.machine(),
    }
    path = ROOT / "bench" / "results" / "plans.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
