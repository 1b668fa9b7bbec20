"""Plan files use the whole plan language, on the same queue as every other step."""

from __future__ import annotations

import asyncio

import pytest

from onebox.agent.plan import parse_plan
from onebox.bounds import load_yaml
from onebox.config import Settings
from onebox.errors import LLMNotConfigured
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

FULL = """
name: full-language
steps:
  - id: files
    tool: bash
    code: printf '["a", "bb", "ccc"]' > "$ONEBOX_RESULT"
  - id: sizes
    tool: python
    foreach: files.result
    depends_on: [files]
    code: |
      import json, os
      item = json.load(open(os.environ["ONEBOX_INPUTS"]))["item"]
      json.dump(len(item), open(os.environ["ONEBOX_RESULT"], "w"))
  - id: big
    tool: bash
    code: echo big
    when: sum(sizes.result) > 100
    depends_on: [sizes]
  - id: poll
    tool: bash
    code: |
      n=$(cat n 2>/dev/null || echo 0); n=$((n + 1)); echo $n > n
      printf '{"done": %s}' "$([ $n -ge 3 ] && echo true || echo false)" > "$ONEBOX_RESULT"
    until: poll.result.done
    max_iterations: 5
  - id: answer
    kind: final
    depends_on: [sizes, poll]
    input: {answer: "{{ len(sizes.result) }} files, {{ sum(sizes.result) }} bytes"}
"""



async def test_a_plan_file_with_loops_conditions_and_a_final_answer_runs(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    submitted = await submit_plan(db, settings, parse_plan(load_yaml(FULL)))
    worker = Worker(db, backend, settings, run_id=submitted.run_id)
    await asyncio.wait_for(worker.serve(asyncio.Event()), 120)
    run = await runs_api.get_run(db, submitted.run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    events = await runs_api.run_events(db, submitted.run_id)
    finished = next(e for e in events if e["type"] == "agent_finished")
    assert finished["payload"]["answer"] == "3 files, 6 bytes"
    skipped = [e["payload"]["step_id"] for e in events if e["type"] == "step_skipped"]
    assert skipped == ["big"]
    steps = [(s["step_id"], s["status"]) for s in await runs_api.run_steps(db, submitted.run_id)]
    assert sorted(sid for sid, _ in steps if sid.startswith("sizes")) == ["sizes[0]", "sizes[1]",
                                                                     "sizes[2]"]
    assert [st for sid, st in steps if sid == "poll"] == ["SUCCESS"] * 3
    assert not any(s["tool_name"] == "model" for s in await runs_api.run_steps(
        db, submitted.run_id)), "a plan without goals makes no model call"


async def test_a_goal_without_a_model_is_refused_at_submission(
        db: Database, settings: Settings) -> None:
    settings.llm.model = None
    plan = parse_plan({"name": "g", "steps": [
        {"id": "sum", "tool": "python", "goal": "add the numbers in n.txt"}]})
    with pytest.raises(LLMNotConfigured) as caught:
        await submit_plan(db, settings, plan)
    assert "ONEBOX_LLM__MODEL" in caught.value.message and caught.value.field == "steps[sum].goal"
    assert await db.fetchone("SELECT count(*) AS n FROM onebox.runs") == {"n": 0}
