"""The agent sees what the catalog has: unknown tools are refused at plan validation, for a
plan file and for a model's plan (real database)."""

from __future__ import annotations

import pytest

from onebox.agent.actions import ToolHint, ToolsResult
from onebox.agent.loop import Agent
from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.errors import PlanError
from onebox.runtime.engine.step_context import with_catalog_names
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database
from onebox.testing import ScriptedModel, run_agent_offline, step_ok

UNKNOWN = {"name": "p", "steps": [
    {"id": "conv", "kind": "tool", "input": {"name": "pdf_magic", "path": "a.pdf"}}]}


async def test_a_plan_file_naming_an_unknown_tool_is_refused_with_the_catalog(
        db: Database, settings: Settings) -> None:
    with pytest.raises(PlanError) as caught:
        await submit_plan(db, settings, parse_plan(UNKNOWN))
    message = caught.value.message
    assert "steps[conv].input.name" in message and "unknown tool 'pdf_magic'" in message
    assert "python" in message and "knowledge_search" in message
    assert "onebox tools list" in message
    assert await db.fetch("SELECT id FROM onebox.runs") == []


async def test_a_model_plan_naming_an_unknown_tool_is_sent_back_before_any_step(
        db: Database) -> None:
    async with db.connection() as conn:
        found = await with_catalog_names(conn, ToolsResult("a2", ()))
    assert "python" in found.names and "knowledge_search" in found.names
    good = {"name": "p", "steps": [{"id": "a", "tool": "python", "code": "print(1)"}]}
    model = ScriptedModel([{"goal": "convert", "formats": ["pdf"]}, UNKNOWN, good])
    hints = [ToolHint(name, "a catalog tool") for name in found.names]

    run = await run_agent_offline(Agent("convert a.pdf"), model, lambda a: step_ok("1\n"),
                                  tools=hints)

    repair = model.requests[2].messages[-1].content or ""
    assert "unknown tool 'pdf_magic'" in repair and "python" in repair
    assert run.result.ok and run.executed() == ["a"]
