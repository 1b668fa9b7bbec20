"""A run's answer (issue 14 point 1): stored on the run in the transaction that finishes it,
and shown by `onebox run` (last), `onebox show` (top) and --json. Real database, sandbox and
CLI; the chat model is scripted."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
import yaml
from test_snapshot_cli import onebox, onebox_subprocess

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.archive import MAX_ANSWER_CHARS, stored_answer
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "add numbers", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
TASK_PLAN = {"name": "adder", "steps": [
    {"id": "total", "tool": "python", "code": "print(3 + 4 + 5)"}]}
FINAL_PLAN = {"name": "with-final", "steps": [
    {"id": "count", "tool": "bash", "code": "printf 'a\\nb\\nc\\n' | wc -l"},
    {"id": "answer", "kind": "final", "depends_on": ["count"],
     "input": {"answer": "there are {{ count.stdout }} lines"}}]}
PLAIN_PLAN = {"name": "plain", "steps": [{"id": "hello", "tool": "bash", "code": "echo hello"}]}
# scheduled by the agent (a condition), no final step: its last stdout is no answer
SKIPPED_FINAL = {"name": "skipped-final", "steps": [
    {"id": "hello", "tool": "bash", "code": "echo hello"},
    {"id": "answer", "kind": "final", "depends_on": ["hello"], "when": "hello.exit_code == 7",
     "input": {"answer": "never"}}]}



async def drive(db: Database, backend: SandboxBackend, settings: Settings, run_id: uuid.UUID,
                model: ScriptedModel | None = None) -> dict:
    worker = Worker(db, backend, settings, run_id=run_id, model=model)  # type: ignore[arg-type]
    await asyncio.wait_for(worker.serve(asyncio.Event()), 90)
    return await runs_api.get_run(db, run_id)


async def test_a_task_runs_answer_is_stored_and_shown_by_show_and_json(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, _ = await submit_task(db, "add up 3 4 5")
    run = await drive(db, backend, settings, run_id, ScriptedModel([INTENT, TASK_PLAN]))
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"] == "12"
    finished = [e for e in await runs_api.run_events(db, run_id) if e["type"] == "run_succeeded"]
    assert finished[0]["payload"]["answer"] == "12"
    shown = json.loads((await onebox(settings, "show", str(run_id), "--json"))[1])
    assert shown["run"]["answer"] == "12"
    listed = json.loads((await onebox(settings, "runs", "--json"))[1])
    assert [r["answer"] for r in listed["runs"] if r["id"] == str(run_id)] == ["12"]
    code, text, _ = await onebox(settings, "show", str(run_id))
    assert code == 0 and "answer" in text
    assert text.index("answer") < text.index("total"), "show prints the answer at the top"


async def test_a_plan_files_final_step_is_its_answer_printed_last_by_run(
        db: Database, settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "final.yaml"
    path.write_text(yaml.safe_dump(FINAL_PLAN))
    code, text, err = await onebox_subprocess(settings, "run", str(path))
    assert code == 0, err
    last = [line.strip("│╭╮╰╯─ ") for line in text.rstrip().splitlines()[-4:]]
    assert last == ["answer", "there are 3", "lines", ""], text
    assert text.rindex("answer") > text.index("The same rows in SQL")
    code, out, err = await onebox_subprocess(settings, "run", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["run"]["answer"] == "there are 3\n lines"


@pytest.mark.parametrize("spec", [PLAIN_PLAN, SKIPPED_FINAL], ids=["plan-index", "agent"])
async def test_a_plan_without_a_final_step_has_no_answer(
        db: Database, backend: SandboxBackend, settings: Settings, spec: dict) -> None:
    submitted = await submit_plan(db, settings, parse_plan(spec))
    run = await drive(db, backend, settings, submitted.run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"] is None
    shown = json.loads((await onebox(settings, "show", str(submitted.run_id), "--json"))[1])
    assert shown["run"]["answer"] is None


def test_a_stored_answer_is_bounded_and_nul_free() -> None:
    long = stored_answer("x" * (MAX_ANSWER_CHARS * 2))
    assert long is not None and len(long) == MAX_ANSWER_CHARS
    assert long.endswith(f"of its {MAX_ANSWER_CHARS * 2} characters kept]")
    assert stored_answer("a\0b") == "a\ufffdb"
    assert stored_answer("  \n") is None and stored_answer(None) is None


async def test_the_database_refuses_an_unbounded_answer(db: Database, settings: Settings) -> None:
    import psycopg

    submitted = await submit_plan(db, settings, parse_plan(PLAIN_PLAN))
    with pytest.raises(psycopg.errors.CheckViolation):
        await db.fetch("UPDATE onebox.runs SET answer = repeat('x', %s) WHERE id = %s "
                       "RETURNING id", (MAX_ANSWER_CHARS + 1, submitted.run_id))
