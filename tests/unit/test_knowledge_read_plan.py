"""knowledge_read in the plan language: validated like the other kinds, its max_bytes bounded
(a literal at validation, a rendered one when the step runs), performed as a ReadDocument."""

from __future__ import annotations

import pytest

from onebox.agent.actions import ReadDocument
from onebox.agent.loop import Agent
from onebox.agent.plan import parse_plan
from onebox.agent.prompting import plan_request, tool_lines
from onebox.agent.state import Instance
from onebox.agent.steps import step_action
from onebox.bounds import DEFAULT_READ_BYTES, MAX_READ_BYTES
from onebox.errors import PlanError
from onebox.testing import run_agent_offline


def refused(step: dict) -> PlanError:
    with pytest.raises(PlanError) as info:
        parse_plan({"steps": [step]})
    return info.value


def test_a_read_needs_a_document_and_a_bounded_max_bytes() -> None:
    assert refused({"id": "r", "kind": "knowledge_read"}).field == "steps[r].input.document"
    for bad in (0, MAX_READ_BYTES + 1, True, 2.5):
        err = refused({"id": "r", "kind": "knowledge_read",
                       "input": {"document": "a.csv", "max_bytes": bad}})
        assert err.field == "steps[r].input.max_bytes" and str(MAX_READ_BYTES) in err.message
    parse_plan({"steps": [{"id": "r", "kind": "knowledge_read",
                           "input": {"document": "a.csv", "max_bytes": MAX_READ_BYTES}}]})


def _action(data: dict, names: dict | None = None) -> tuple[type, dict]:
    plan = parse_plan({"steps": [{"id": "s", "kind": "knowledge_search",
                                  "input": {"query": "q"}},
                                 {"id": "r", "kind": "knowledge_read", "input": data,
                                  "depends_on": ["s"]}]})
    return step_action(plan.step("r"), Instance("r", "r"), names or {}, 1, 1)


def test_the_step_becomes_a_read_document_with_rendered_arguments() -> None:
    hit = {"s": {"result": [{"document_id": "d-1"}]}}
    cls, fields = _action({"document": "{{ s.result[0].document_id }}", "collection": "hr"}, hit)
    assert cls is ReadDocument and fields["document"] == "d-1"
    assert (fields["collection"], fields["max_bytes"]) == ("hr", DEFAULT_READ_BYTES)
    with pytest.raises(PlanError) as info:
        _action({"document": "a", "max_bytes": "{{ s.result[0].document_id }}"}, hit)
    assert info.value.field == "steps[r].input.max_bytes"


async def test_an_agent_run_reads_then_uses_the_text() -> None:
    plan = parse_plan({"steps": [
        {"id": "r", "kind": "knowledge_read", "input": {"document": "a.csv"}},
        {"id": "end", "kind": "final", "depends_on": ["r"],
         "input": {"answer": "{{ r.result.text }}"}}]})

    def read(action: ReadDocument) -> dict[str, str]:
        assert action.document == "a.csv" and action.max_bytes == DEFAULT_READ_BYTES
        return {"text": "x,y\n1,2\n"}

    run = await run_agent_offline(Agent("read", plan=plan), documents=read)
    assert run.result.ok and run.result.answer == "x,y\n1,2\n"


def test_the_plan_prompt_teaches_knowledge_read() -> None:
    from onebox.agent.actions import Intent

    text = plan_request("avg", Intent(goal="avg"), []).messages[-1].content or ""
    assert "knowledge_read" in text and "document_id" in text
    assert "knowledge_read" in tool_lines([])
