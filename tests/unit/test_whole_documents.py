"""Code steps that read knowledge documents whole (``documents``), and the "from excerpts"
note an answer built from search hits carries (issue 28, point 3)."""

from __future__ import annotations

import pytest

from onebox.agent.actions import Finish
from onebox.agent.loop import Agent
from onebox.agent.plan import document_file, parse_plan
from onebox.agent.state import Instance
from onebox.agent.steps import step_action
from onebox.errors import PlanError
from onebox.testing import run_agent_offline, step_ok


def refused(step: dict) -> PlanError:
    with pytest.raises(PlanError) as info:
        parse_plan({"steps": [step]})
    return info.value


def test_documents_are_for_code_and_tool_steps_and_get_distinct_files() -> None:
    err = refused({"id": "r", "kind": "knowledge_search", "input": {"query": "q"},
                   "documents": ["a.csv"]})
    assert err.field == "steps[r].documents" and "knowledge_read" in err.message
    err = refused({"id": "c", "tool": "python", "code": "pass",
                   "documents": ["/a/sales.csv", "/b/sales.csv"]})
    assert err.field == "steps[c].documents" and "document id" in err.message
    assert refused({"id": "c", "tool": "python", "code": "pass",
                    "documents": [" "]}).field == "steps[c].documents"
    assert document_file("/home/ana/data/sales 2026.csv") == ".onebox/documents/sales_2026.csv"
    assert document_file("..") == ".onebox/documents/document"


def test_a_code_step_gets_the_paths_of_its_documents_in_its_inputs() -> None:
    plan = parse_plan({"steps": [{"id": "c", "tool": "python", "code": "pass",
                                  "documents": ["data/sales.csv"]}]})
    _, fields = step_action(plan.step("c"), Instance("c", "c", code="pass"), {}, 1, 1)
    assert fields["inputs"]["documents"] == {
        "data/sales.csv": "/workspace/.onebox/documents/sales.csv"}


HITS = [{"chunk_id": n, "document_id": "d1", "content": "...",
         "document": {"id": "d1", "source": "/data/sales.csv", "n_chunks": 9}} for n in (4, 7, 4)]


async def _finish(steps: list[dict], read: dict | None = None) -> Finish:
    agent = Agent(plan=parse_plan({"steps": steps}))
    run = await run_agent_offline(agent, executor=lambda a: step_ok(result={"total": 1}),
                                  knowledge=lambda a: HITS, documents=lambda a: read)
    assert run.result.ok, run.result.error
    return run.result


SEARCH = {"id": "s", "kind": "knowledge_search", "input": {"query": "amount"}}
FINAL = {"id": "f", "kind": "final", "depends_on": ["c"], "input": {"answer": "total 1"}}


async def test_an_answer_from_search_hits_says_how_many_chunks_it_saw() -> None:
    finish = await _finish([SEARCH, {"id": "c", "tool": "python", "code": "pass",
                                     "depends_on": ["s"]}, FINAL])
    assert finish.excerpts == ({"document_id": "d1", "source": "/data/sales.csv",
                                "chunks_seen": 2, "chunks_total": 9},)
    head, note = (finish.answer or "").split("\n\n")
    assert head == "total 1" and note.startswith("[from excerpts: sales.csv (2 of 9 chunks)")
    assert "--file" in note and "knowledge_read" in note


@pytest.mark.parametrize("reader", [
    {"id": "c", "tool": "python", "code": "pass", "depends_on": ["s"],
     "documents": ["sales.csv"]},
    {"id": "c", "kind": "knowledge_read", "input": {"document": "d1"}, "depends_on": ["s"]},
])
async def test_no_note_when_the_document_was_read_whole(reader: dict) -> None:
    finish = await _finish([SEARCH, reader, FINAL], read={"document_id": "d1", "text": "x"})
    assert finish.excerpts == () and finish.answer == "total 1"


async def test_a_search_the_answer_does_not_depend_on_adds_no_note() -> None:
    finish = await _finish([SEARCH, {"id": "c", "tool": "python", "code": "pass"}, FINAL])
    assert finish.excerpts == () and finish.answer == "total 1"
