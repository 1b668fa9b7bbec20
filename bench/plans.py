"""Plan validation and ordering time by plan size, the cost of the request bounds, and
submitting and showing a 10,000-step run.

For chains (each step depends on the previous one) and wide DAGs (a root, N parallel
steps, a join that depends on all of them) of 1,000 / 10,000 / 50,000 steps: the time
of ``parse_plan`` (schema, graph, expressions, topological order) and of
``PlanIndex.of`` (what a worker computes once per plan version). Then the bounds
themselves: refusing a YAML alias bomb, and the raw JSON depth check of a 1 MiB body.
Then, on the embedded PostgreSQL: the time to submit a 10,000-step fan-out (10,000 steps
ready at once), a wide DAG and a chain (`submit_plan`), the longest transaction of that
submission (what holds the run row and the event horizon), and the time of `onebox show`'s
first page with its summary (`run_timeline` plus rendering) and of the API's run detail.
Writes bench/results/plans.json.

Run: .venv/bin/python bench/plans.py [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from onebox.agent.plan import parse_plan
from onebox.bounds import load_yaml, raw_json_too_deep
from onebox.cli.render import timeline
from onebox.config import Settings, load_settings
from onebox.errors import ValidationError
from onebox.runtime.engine.schedule import PlanIndex
from onebox.runtime.services.run_service import run_detail
from onebox.runtime.services.runs import run_timeline
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database
from onebox.store.embedded import stop_embedded

ROOT = Path(__file__).resolve().parents[1]
TARGET_10K_CHAIN_S = 1.0
BIG_STEPS = 10_000
TARGET_SUBMIT_S = 2.0  # issue 12: a 10,000-step plan is accepted within 2 s
TARGET_SHOW_S = 1.0  # and its summary and first page are shown within 1 s
TARGET_TRANSACTION_S = 0.1  # no transaction holds other runs' events back longer
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


def fan(n: int) -> dict[str, Any]:
    return {"steps": [{"id": f"w{i}", "tool": "bash", "code": "true"} for i in range(n)]}


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


@contextlib.asynccontextmanager
async def longest_transaction(db: Database) -> AsyncIterator[list[float]]:
    """Time every transaction ``db`` opens while in the block; yields the list of seconds."""
    spans: list[float] = []
    real = db.transaction

    @contextlib.asynccontextmanager
    async def timed_transaction() -> AsyncIterator[Any]:
        start = time.perf_counter()
        async with real() as conn:
            yield conn
        spans.append(time.perf_counter() - start)

    db.transaction = timed_transaction  # type: ignore[method-assign]
    try:
        yield spans
    finally:
        db.transaction = real  # type: ignore[method-assign]


async def submit_and_show(db: Database, settings: Settings, shape: str,
                          data: dict[str, Any]) -> dict[str, Any]:
    plan = parse_plan(data)
    async with longest_transaction(db) as spans:
        start = time.perf_counter()
        submitted = await submit_plan(db, settings, plan)
        submit_s = time.perf_counter() - start
    start = time.perf_counter()
    tl = await run_timeline(db, submitted.run_id)
    Console(file=io.StringIO(), width=120).print(timeline(tl["run"], tl["steps"],
                                                          summary=tl["summary"]))
    show_s = time.perf_counter() - start
    start = time.perf_counter()
    await run_detail(db, submitted.run_id)
    api_s = time.perf_counter() - start
    return {"shape": shape, "steps": len(plan.steps), "submit_s": round(submit_s, 3),
            "transactions": len(spans), "longest_transaction_s": round(max(spans), 4),
            "show_first_page_s": round(show_s, 3), "api_detail_s": round(api_s, 3),
            "meets_target": submit_s <= TARGET_SUBMIT_S and show_s <= TARGET_SHOW_S
            and max(spans) <= TARGET_TRANSACTION_S}


async def big_runs(repeat: int) -> list[dict[str, Any]]:
    home = Path(tempfile.mkdtemp(prefix="obx-bench-plans-"))
    home.chmod(0o755)
    settings = load_settings(home=home)
    db = await Database.open(settings)
    try:
        return [await submit_and_show(db, settings, shape, make(BIG_STEPS))
                for shape, make in (("fan", fan), ("wide", wide), ("chain", chain))
                for _ in range(max(1, repeat // 2))]
    finally:
        await db.close()
        stop_embedded(settings.pg_dir)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    plans = [plan_case(shape, make(n), args.repeat)
             for shape, make in (("chain", chain), ("wide", wide)) for n in SIZES]
    chain_10k = next(p for p in plans if p["shape"] == "chain" and p["steps"] == 10_000)
    big = asyncio.run(big_runs(args.repeat))
    out = {
        "benchmark": "plan validation and ordering by size; cost of the request bounds; "
                     "submitting and showing a 10,000-step run",
        "target_10k_chain_validate_s": TARGET_10K_CHAIN_S,
        "chain_10k_validate_s_p50": chain_10k["validate_s_p50"],
        "meets_target": chain_10k["validate_s_max"] < TARGET_10K_CHAIN_S,
        "plans": plans, "bounds": bounds_cases(args.repeat), "big_runs": big,
        "python": platform.python_version(), "machine": platform.machine(),
    }
    path = ROOT / "bench" / "results" / "plans.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
