"""Turn one step instance into the action that performs it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onebox.agent.actions import (
    Action,
    AskApproval,
    ExecuteStep,
    ReadDocument,
    Recall,
    Remember,
    SearchKnowledge,
)
from onebox.agent.expressions import render
from onebox.agent.plan import Step, document_file, read_bytes, top_k
from onebox.agent.state import Instance
from onebox.bounds import DEFAULT_READ_BYTES

_KINDS: dict[str, type[Action]] = {
    "code": ExecuteStep, "tool": ExecuteStep, "http": ExecuteStep, "knowledge_search": SearchKnowledge,
    "knowledge_read": ReadDocument,
    "memory_remember": Remember, "memory_recall": Recall, "approval": AskApproval,
}


def render_input(step: Step, names: Mapping[str, Any]) -> dict[str, Any]:
    """``step.input`` with every ``{{ expr }}`` in its strings replaced by the value."""
    return {k: render(v, names) if isinstance(v, str) else v for k, v in step.input.items()}


def document_paths(step: Step) -> dict[str, str]:
    """Each document the step names -> the absolute path of its whole text in the sandbox."""
    return {name: f"/workspace/{document_file(name)}" for name in step.documents}


def step_action(step: Step, inst: Instance, names: Mapping[str, Any], attempt: int,
                version: int) -> tuple[type[Action], dict[str, Any]]:
    """The action class and its fields for this attempt; ExpressionError if a template fails,
    PlanError if a rendered argument is out of bounds (``top_k``)."""
    fields: dict[str, Any] = {"step_id": step.id, "instance": inst.key, "attempt": attempt,
                              "plan_version": version}
    data = render_input(step, names)
    if step.kind in ("code", "tool", "http"):
        update: dict[str, Any] = {"input": data}
        if step.kind == "code":
            update["code"] = inst.code
        inputs = {"deps": {d: names.get(d) for d in step.depends_on}, **inst.loop_names()}
        if step.documents:
            inputs["documents"] = document_paths(step)
        fields.update(step=step.model_copy(update=update), inputs=inputs)
    elif step.kind in ("knowledge_search", "memory_recall"):
        fields.update(query=data["query"], top_k=top_k(data.get("top_k", 5), step.id))
        if step.kind == "memory_recall":
            fields["scope"] = data.get("scope")
    elif step.kind == "knowledge_read":
        collection = data.get("collection")
        fields.update(document=data["document"],
                      collection=str(collection) if collection else None,
                      max_bytes=read_bytes(data.get("max_bytes", DEFAULT_READ_BYTES), step.id))
    elif step.kind == "memory_remember":
        fields.update(text=data["text"], scope=data.get("scope"))
    elif step.kind == "approval":
        fields.update(prompt=data["prompt"])
    return _KINDS[step.kind], fields
