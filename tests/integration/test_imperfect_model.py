"""The closing scenario of issue 13: a realistically imperfect model still gets the right
answer, because the agent can read a whole document and sees what failed.

A CSV stored as 8+ overlapping chunks is in the knowledge base. The scripted model answers
in fenced ```json blocks, plans to read the CSV whole with ``knowledge_read`` and to compute
the mean in a python step whose code it writes at run time; its first draft raises a
KeyError on a column name, the fix prompt shows the failing line, and the fixed code gives
the right mean. Real database, real sandbox, one worker driving the one engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Sequence

from onebox.config import Settings
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

ROWS = 600
BUGGY_LINE = 'total = sum(float(row["Amount"]) for row in rows)'


class DigestEmbeddingModel(EmbeddingModel):
    """Deterministic vectors from a text's digest: this test reads documents whole, so the
    embeddings only have to exist (a real model would spend ~10 s on 8+ passages)."""

    name, dim = "test/digest-384", 384

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        return [[b - 127.5 for b in hashlib.shake_256(t.encode()).digest(self.dim)]
                for t in texts]


def sales_csv() -> tuple[str, float]:
    lines = ["day,region,amount"]
    amounts = [round(((i * 7919) % 1000) / 4 + 10, 2) for i in range(ROWS)]
    regions = ("north", "south", "east", "west")
    lines += [f"2026-{1 + i % 12:02d}-{1 + i % 28:02d},{regions[i % 4]},{a}"
              for i, a in enumerate(amounts)]
    return "\n".join(lines) + "\n", round(sum(amounts) / len(amounts), 2)


def fenced(data: object, prose: str = "Here is the plan.") -> str:
    return f"{prose}\n```json\n{json.dumps(data, indent=1)}\n```\nLet me know if it helps."


def python_reply(code: str) -> str:
    return f"Sure:\n```python\n{code}```\n"


INTENT = {"goal": "mean sale amount", "entities": ["sales.csv"],
          "capabilities": ["knowledge_read", "python"], "formats": ["csv"], "risks": [],
          "fallbacks": []}
PLAN = {"name": "mean-amount", "steps": [
    {"id": "read", "kind": "knowledge_read", "input": {"document": "sales.csv"}},
    {"id": "stats", "tool": "python", "depends_on": ["read"],
     "goal": "Compute the mean of the amount column of the CSV text in "
             "deps.read.result.text; write {\"mean\": <rounded to 2 places>} to $ONEBOX_RESULT"},
    {"id": "answer", "kind": "final", "depends_on": ["stats"],
     "input": {"answer": "The mean amount is {{ stats.result.mean }}"}},
]}
HEAD = ("import csv, io, json, os\n"
        "inputs = json.load(open(os.environ['ONEBOX_INPUTS']))\n"
        "rows = list(csv.DictReader(io.StringIO(inputs['deps']['read']['result']['text'])))\n")
DRAFT = HEAD + BUGGY_LINE + "\nprint(total / len(rows))\n"
FIXED = (HEAD + 'total = sum(float(row["amount"]) for row in rows)\n'
         "mean = round(total / len(rows), 2)\n"
         "json.dump({'mean': mean, 'rows': len(rows)}, open(os.environ['ONEBOX_RESULT'], 'w'))\n"
         "print(mean)\n")




async def drive(db: Database, backend: SandboxBackend, settings: Settings,
                run_id: uuid.UUID, model: ScriptedModel) -> None:
    from onebox.objects.registry import get_object_store

    worker = Worker(db, backend, settings, run_id=run_id, model=model,
                    objects=get_object_store(settings))
    await asyncio.wait_for(worker.serve(asyncio.Event()), 120)


async def test_an_imperfect_model_reads_the_csv_whole_fixes_its_draft_and_is_right(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    text, mean = sales_csv()
    kb = Knowledge.build(db, DigestEmbeddingModel(), settings).kb
    stored = await kb.add_text("/data/sales.csv", text, collection="default/sales")
    doc = (await db.fetch("SELECT n_chunks FROM onebox.kb_documents WHERE id = %s",
                          (stored.document_id,)))[0]
    assert doc["n_chunks"] >= 8, "the CSV must span many chunks for the scenario to mean anything"

    run_id, _ = await submit_task(db, "What is the mean sale amount in sales.csv?")
    model = ScriptedModel([fenced(INTENT, "The intent:"), fenced(PLAN),
                           python_reply(DRAFT), python_reply(FIXED)])
    await drive(db, backend, settings, run_id, model)

    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    fix_prompt = model.requests[3].messages[-1].content or ""
    assert BUGGY_LINE in fix_prompt and "KeyError" in fix_prompt
    steps = await runs_api.run_steps(db, run_id)
    read = next(s for s in steps if s["step_id"] == "read")
    assert read["status"] == "SUCCESS" and read["tool_name"] == "knowledge_read"  # the catalog name
    attempts = [s["status"] for s in steps if s["step_id"] == "stats"]
    assert attempts == ["FAILED", "SUCCESS"]
    events = await runs_api.run_events(db, run_id)
    finished = next(e for e in events if e["type"] == "agent_finished")
    assert finished["payload"]["answer"] == f"The mean amount is {mean}"
    observed = [e["payload"] for e in events if e["type"] == "agent_observation"
                and isinstance((e["payload"].get("result") or None), dict)
                and "text" in e["payload"]["result"]]
    assert observed[0]["result"]["text"] == text  # the original, newlines and all
