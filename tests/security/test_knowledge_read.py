"""knowledge_read is tenant-isolated: a run of one tenant never reads another tenant's
document, whatever it names (the document id a leaked search hit would carry, the exact
source path, a path suffix, the other tenant's collection). Real database, real worker,
real sandbox backend; a control step of the same run reads the tenant's own document
through the same path, so the probe is known to reach the store.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence

import pytest

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

SECRET = "ACME-PAYROLL-SECRET-7731"
OWN = "GLOBEX-OWN-LEDGER-4410"


class FlatEmbeddingModel(EmbeddingModel):
    """Any vector will do: this test never searches."""

    name, dim = "test/flat-384", 384

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        return [[1.0] * self.dim for _ in texts]


pytestmark = pytest.mark.onebox_settings({"runtime.heartbeat_s": 1.0})


def read(step_id: str, document: str, collection: str | None = None) -> dict[str, object]:
    data: dict[str, object] = {"document": document}
    if collection:
        data["collection"] = collection
    return {"id": step_id, "kind": "knowledge_read", "input": data, "max_attempts": 1}


async def run_plan(db: Database, backend: SandboxBackend, settings: Settings,
                   steps: list[dict[str, object]], tenant: str) -> uuid.UUID:
    from onebox.objects.registry import get_object_store

    submitted = await submit_plan(db, settings, parse_plan({"steps": steps}), tenant_id=tenant)
    worker = Worker(db, backend, settings, run_id=submitted.run_id,
                    objects=get_object_store(settings))
    await asyncio.wait_for(worker.serve(asyncio.Event()), 60)
    return submitted.run_id


async def test_a_tenant_never_reads_another_tenants_document(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    kb = Knowledge.build(db, FlatEmbeddingModel(), settings).kb
    theirs = await kb.add_text("/data/payroll.csv", f"name,pay\nana,{SECRET}\n",
                               collection="acme/hr")
    await kb.add_text("/data/ledger.csv", f"item,cost\nink,{OWN}\n", collection="globex/hr")
    attacks = [read("by_id", theirs.document_id), read("by_source", "/data/payroll.csv"),
               read("by_suffix", "payroll.csv"),
               read("by_collection", theirs.document_id, collection="acme/hr"),
               read("by_dotdot", "payroll.csv", collection="../acme/hr")]
    own = await run_plan(db, backend, settings, [read("own", "ledger.csv", collection="hr")],
                         "globex")
    assert (await runs_api.get_run(db, own))["status"] == "SUCCEEDED"  # the probe reaches
    assert OWN in json.dumps(await runs_api.run_events(db, own), default=str)  # the store
    for attack in attacks:  # one run each: a failed step stops its run
        run_id = await run_plan(db, backend, settings, [attack], "globex")
        step = next(s for s in await runs_api.run_steps(db, run_id) if s["step_id"] == attack["id"])
        assert step["status"] == "FAILED", attack
        assert "not_found" in (step["error"] or "") and "Fix:" in step["error"], step["error"]
        everything = json.dumps([await runs_api.run_events(db, run_id), step], default=str)
        assert SECRET not in everything


async def test_the_default_tenant_does_not_see_a_named_tenants_documents(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    kb = Knowledge.build(db, FlatEmbeddingModel(), settings).kb
    theirs = await kb.add_text("/data/payroll.csv", f"name,pay\nana,{SECRET}\n",
                               collection="acme/hr")
    run_id = await run_plan(db, backend, settings, [read("by_id", theirs.document_id)],
                            "default")
    step = next(s for s in await runs_api.run_steps(db, run_id) if s["step_id"] == "by_id")
    assert step["status"] == "FAILED" and "not_found" in (step["error"] or "")
    events = json.dumps(await runs_api.run_events(db, run_id), default=str)
    assert SECRET not in events


def cat(step_id: str, document: str) -> dict[str, object]:
    """A code step reading a document whole through ``documents`` and printing it."""
    return {"id": step_id, "tool": "python", "documents": [document], "max_attempts": 1,
            "code": "import glob\nfor p in glob.glob('.onebox/documents/*'):\n"
                    "    print(open(p).read())\n"}


async def test_a_code_steps_documents_are_tenant_isolated_too(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    kb = Knowledge.build(db, FlatEmbeddingModel(), settings).kb
    theirs = await kb.add_text("/data/payroll.csv", f"name,pay\nana,{SECRET}\n",
                               collection="acme/hr")
    await kb.add_text("/data/ledger.csv", f"item,cost\nink,{OWN}\n", collection="globex/hr")
    own = await run_plan(db, backend, settings, [cat("own", "ledger.csv")], "globex")
    step = (await runs_api.run_steps(db, own))[0]
    assert step["status"] == "SUCCESS" and OWN in step["stdout"]  # the probe reaches the store
    for attack in (cat("by_id", theirs.document_id), cat("by_suffix", "payroll.csv")):
        run_id = await run_plan(db, backend, settings, [attack], "globex")
        step = next(s for s in await runs_api.run_steps(db, run_id)
                    if s["step_id"] == attack["id"])
        assert step["status"] == "FAILED" and "not_found" in (step["error"] or ""), step
        everything = json.dumps([await runs_api.run_events(db, run_id), step], default=str)
        assert SECRET not in everything
