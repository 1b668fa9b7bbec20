"""Issue 28, point 3: a task over a file added with `kb add` computes over the whole file,
and an answer drawn from search hits (chunks) says so.

A 360-row CSV is added the way `onebox kb add` adds it (``add_paths``, collection
``default/docs``). First task: the plan's python step names the document in ``documents``;
the runtime writes the whole document into the step's workspace and the code sums the
column over all 360 rows. Second task: the plan searches the knowledge base and sums what
the hits show; the run still succeeds, but its answer and its ``agent_finished`` event say
the answer came from excerpts, N of M chunks. Real database, real sandbox, scripted model.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from onebox.config import Settings
from onebox.knowledge.collections import tenant_name
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import embedding_model_from_settings
from onebox.objects.registry import get_object_store
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

ROWS = 360
INTENT = {"goal": "total sale amount", "entities": ["sales.csv"], "capabilities": ["python"],
          "formats": ["csv"], "risks": [], "fallbacks": []}
WHOLE_PLAN = {"name": "total", "steps": [
    {"id": "total", "tool": "python", "documents": ["sales.csv"],
     "goal": "Sum the amount column of sales.csv; write {\"total\", \"rows\"} to $ONEBOX_RESULT"},
    {"id": "answer", "kind": "final", "depends_on": ["total"],
     "input": {"answer": "The total amount is {{ total.result.total }} over "
                         "{{ total.result.rows }} rows"}},
]}
WHOLE_CODE = (
    "import csv, json, os\n"
    "inputs = json.load(open(os.environ['ONEBOX_INPUTS']))\n"
    "rows = list(csv.DictReader(open(inputs['documents']['sales.csv'])))\n"
    "total = round(sum(float(r['amount']) for r in rows), 2)\n"
    "json.dump({'total': total, 'rows': len(rows)}, open(os.environ['ONEBOX_RESULT'], 'w'))\n")
SEARCH_PLAN = {"name": "total-from-hits", "steps": [
    {"id": "find", "kind": "knowledge_search", "input": {"query": "amount", "top_k": 2}},
    {"id": "total", "tool": "python", "depends_on": ["find"], "code": (
        "import json, os\n"
        "hits = json.load(open(os.environ['ONEBOX_INPUTS']))['deps']['find']['result']\n"
        "lines = {l for h in hits for l in h['content'].split() if l.count(',') == 2}\n"
        "total = round(sum(float(l.split(',')[2]) for l in lines if l[0].isdigit()), 2)\n"
        "json.dump({'total': total}, open(os.environ['ONEBOX_RESULT'], 'w'))\n")},
    {"id": "answer", "kind": "final", "depends_on": ["total"],
     "input": {"answer": "The total amount is {{ total.result.total }}"}},
]}


async def drive(db: Database, backend: SandboxBackend, settings: Settings,
                run_id: uuid.UUID, model: ScriptedModel) -> None:
    worker = Worker(db, backend, settings, run_id=run_id, model=model,
                    objects=get_object_store(settings))
    await asyncio.wait_for(worker.serve(asyncio.Event()), 120)


def sales_csv() -> tuple[str, float]:
    amounts = [round(((i * 7919) % 1000) / 4 + 10, 2) for i in range(ROWS)]
    lines = ["day,region,amount"] + [f"2026-{1 + i % 12:02d}-{1 + i % 28:02d},r{i % 4},{a}"
                                     for i, a in enumerate(amounts)]
    return "\n".join(lines) + "\n", round(sum(amounts), 2)


async def test_a_sum_over_a_kb_document_reads_it_whole_and_an_answer_from_hits_says_excerpts(
        db: Database, backend: SandboxBackend, settings: Settings, tmp_path: Path) -> None:
    text, total = sales_csv()
    csv_path = tmp_path / "sales.csv"
    csv_path.write_text(text)
    model = embedding_model_from_settings(settings)  # the model the worker searches with
    try:
        kb = Knowledge.build(db, model, settings).kb
        await kb.add_paths([csv_path], collection=tenant_name("default", "docs"))
    finally:
        await model.close()
    n_chunks = (await db.fetch("SELECT n_chunks FROM onebox.kb_documents"))[0]["n_chunks"]
    assert n_chunks >= 3, "the CSV must span several chunks for the scenario to mean anything"

    run_id, _ = await submit_task(db, "What is the total sale amount in sales.csv?")
    scripted = ScriptedModel([INTENT, WHOLE_PLAN, {"code": WHOLE_CODE}])
    await drive(db, backend, settings, run_id, scripted)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"] == f"The total amount is {total} over {ROWS} rows"  # no excerpt note
    plan_prompt, code_prompt = (scripted.requests[i].messages[-1].content or "" for i in (1, 2))
    assert '"documents"' in plan_prompt and "never over search hits" in plan_prompt
    assert "/workspace/.onebox/documents/sales.csv" in code_prompt
    assert await _excerpts(db, run_id) == []

    run_id, _ = await submit_task(db, "What is the total sale amount in sales.csv?")
    await drive(db, backend, settings, run_id, ScriptedModel([INTENT, SEARCH_PLAN]))
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    first_line = run["answer"].splitlines()[0]
    assert first_line.startswith("The total amount is ") and str(total) not in first_line
    assert f"from excerpts: {csv_path.name} (2 of {n_chunks} chunks)" in run["answer"]
    assert "--file" in run["answer"]  # the note names the way to compute over the whole file
    [excerpt] = await _excerpts(db, run_id)
    assert excerpt["source"] == csv_path.name  # a name, never the host path (kb add)
    assert (excerpt["chunks_seen"], excerpt["chunks_total"]) == (2, n_chunks)


async def _excerpts(db: Database, run_id: uuid.UUID) -> list[dict[str, object]]:
    events = await runs_api.run_events(db, run_id)
    finished = next(e for e in events if e["type"] == "agent_finished")
    return list(json.loads(json.dumps(finished["payload"].get("excerpts", []))))
