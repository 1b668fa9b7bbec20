"""The agent's bookkeeping: configuration, step states, step instances, outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from onebox.agent.actions import Decision
from onebox.agent.plan import Step

StepStatus = Literal["waiting", "running", "succeeded", "failed", "skipped"]
FINISHED: frozenset[str] = frozenset({"succeeded", "skipped"})


@dataclass(frozen=True)
class AgentConfig:
    """Bounds on everything the agent may repeat. ``use_model=False`` runs a plan file as is."""

    max_parallel: int = 4
    max_attempts: int = 3
    max_plan_repairs: int = 2
    max_code_fixes: int = 3
    max_replans: int = 2
    max_fanout: int = 100
    max_iterations: int = 10
    prompt_output_chars: int = 2000
    use_model: bool = True
    lookup_tools: bool = True


@dataclass
class Instance:
    """One run of a step: the step itself, or element ``index`` of its foreach list."""

    key: str
    step_id: str
    index: int | None = None
    item: Any = None
    code: str | None = None
    iteration: int = 0
    failures: int = 0
    code_fixes: int = 0
    state: Literal["queued", "active", "done", "failed"] = "queued"
    output: dict[str, Any] | None = None
    next_decision: Decision | None = None

    def loop_names(self) -> dict[str, Any]:
        names: dict[str, Any] = {}
        if self.index is not None:
            names.update(item=self.item, index=self.index)
        if self.iteration:
            names["iteration"] = self.iteration
        return names


@dataclass
class StepState:
    status: StepStatus = "waiting"
    instances: list[Instance] = field(default_factory=list)
    output: dict[str, Any] | None = None
    reason: str = ""

    def summary(self) -> str:
        """One line for the replanning prompt."""
        if self.status == "succeeded" and self.output is not None:
            text = str(self.output.get("result") or self.output.get("stdout") or "")[:200]
            return f"succeeded; output: {text!r}"
        return f"{self.status}; {self.reason}" if self.reason else self.status


def instances_for(step: Step, items: list[Any] | None) -> list[Instance]:
    if items is None:
        return [Instance(step.id, step.id, code=step.code)]
    return [Instance(f"{step.id}[{i}]", step.id, i, item, code=step.code)
            for i, item in enumerate(items)]


def aggregate(step: Step, instances: list[Instance]) -> dict[str, Any]:
    """The output later steps see: the instance's, or lists over a fan-out."""
    outputs = [i.output or {} for i in instances]
    if not step.foreach:
        return outputs[0]
    return {
        "ok": all(o.get("ok", True) for o in outputs),
        "exit_code": 0,
        "result": [o.get("result") for o in outputs],
        "stdout": "".join(str(o.get("stdout") or "") for o in outputs),
        "stderr": "".join(str(o.get("stderr") or "") for o in outputs),
        "files": sorted({f for o in outputs for f in o.get("files") or ()}),
        "items": outputs,
        "error": None,
    }
