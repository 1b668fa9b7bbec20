"""What the agent asks for (actions) and what it is told back (observations).

The agent never performs I/O. A driver (``runtime/`` for real, or
:func:`onebox.testing.run_agent_offline`) loops::

    actions = agent.start()
    while not agent.finished:
        perform each action; for those with ``expects_observation``,
        actions += agent.observe(<Observation with action_id=action.id>)

Action ids (``a1``, ``a2``...) are deterministic: feeding the same
observations in the same order to a fresh agent re-issues the same actions,
so a resumed run replays its stored observations instead of calling the model
or re-running finished steps (:meth:`onebox.agent.loop.Agent.resume` returns what
is still to do). Store each observation together with the actions it produced,
keyed by action id. In a fan-out, ``StepAction.instance`` (``id[2]``) is the unit
that has attempts: use it as the task_execution step id.

Every action carries a :class:`Decision`: why a step runs, is skipped,
retried, fixed or replaced. Store them as events; ``onebox explain`` prints them.

Actions that need an observation back
    CallModel -> ModelReply         CheckCode -> CheckResult     LookupTools -> ToolsResult
    ExecuteStep, SearchKnowledge, ReadDocument, Remember, Recall, AskApproval -> StepResult
Notices (perform/record, nothing comes back)
    RecordIntent, RecordPlan, SkipStep, Finish
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from onebox.agent.plan import Plan, Step
from onebox.bounds import DEFAULT_READ_BYTES
from onebox.errors import AgentError
from onebox.llm.base import ChatRequest, ChatResponse

DecisionKind = Literal[
    "intent", "plan", "repair", "write", "check", "run", "skip", "retry", "fix", "iterate",
    "replan", "insert", "replace", "change", "keep", "lookup", "finish", "fail",
]


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    reason: str
    step_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "step_id": self.step_id}


@dataclass(frozen=True)
class ToolHint:
    """A catalog tool as the planner sees it (the runtime fills these from the catalog)."""

    name: str
    description: str
    cost_class: str = "LOW"
    success_rate: float | None = None
    runs: int = 0


@dataclass(frozen=True)
class Intent:
    goal: str
    entities: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    risks: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Action:
    id: str
    decision: Decision
    type: ClassVar[str] = "action"
    expects_observation: ClassVar[bool] = True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            out[f.name] = _jsonable(getattr(self, f.name))
        return out


@dataclass(frozen=True)
class CallModel(Action):
    """Send ``request`` to the chat model; answer with :class:`ModelReply`."""

    purpose: str  # intent | plan | repair_intent | repair_plan | write_code | fix_code | replan
    request: ChatRequest
    step_id: str | None = None
    type: ClassVar[str] = "call_model"


@dataclass(frozen=True)
class CheckCode(Action):
    """Syntax-check ``code`` without running it (``bash -n FILE``, ``node --check FILE``)."""

    step_id: str
    language: Literal["bash", "node"]
    code: str
    type: ClassVar[str] = "check_code"

    def argv(self, path: str) -> tuple[str, ...]:
        """The command that checks the code once it is written to ``path``."""
        return ("bash", "-n", path) if self.language == "bash" else ("node", "--check", path)


@dataclass(frozen=True)
class LookupTools(Action):
    """Rank catalog tools for these formats/capabilities; answer with :class:`ToolsResult`."""

    formats: tuple[str, ...]
    capabilities: tuple[str, ...]
    type: ClassVar[str] = "lookup_tools"


@dataclass(frozen=True)
class StepAction(Action):
    """One attempt of one step instance (``instance`` is ``id`` or ``id[i]`` in a fan-out)."""

    step_id: str
    instance: str
    attempt: int
    plan_version: int
    type: ClassVar[str] = "step"


@dataclass(frozen=True)
class ExecuteStep(StepAction):
    """Run a code, tool or http step. ``step`` has its final code (and rendered input);
    a ``tool`` step becomes code with :func:`onebox.store.catalog.expand_tool_step`.

    ``inputs`` = {"deps": {step_id: output}, "item", "index", "iteration"}: give
    it to the code (e.g. as a JSON file); a JSON result the code declares goes
    back in :attr:`StepResult.result`.
    """

    step: Step
    inputs: Mapping[str, Any] = field(default_factory=dict)
    type: ClassVar[str] = "execute_step"


@dataclass(frozen=True)
class SearchKnowledge(StepAction):
    query: str
    top_k: int = 5
    type: ClassVar[str] = "search_knowledge"


@dataclass(frozen=True)
class ReadDocument(StepAction):
    """Read one knowledge document whole: ``document`` is its id or source path."""

    document: str
    collection: str | None = None
    max_bytes: int = DEFAULT_READ_BYTES
    type: ClassVar[str] = "read_document"


@dataclass(frozen=True)
class Remember(StepAction):
    text: str
    scope: str | None = None
    type: ClassVar[str] = "remember"


@dataclass(frozen=True)
class Recall(StepAction):
    query: str
    scope: str | None = None
    top_k: int = 5
    type: ClassVar[str] = "recall"


@dataclass(frozen=True)
class AskApproval(StepAction):
    """Wait for a person; answer ``StepResult(ok=approved, result={"comment": ...})``."""

    prompt: str
    type: ClassVar[str] = "ask_approval"


@dataclass(frozen=True)
class RecordIntent(Action):
    intent: Intent
    type: ClassVar[str] = "record_intent"
    expects_observation: ClassVar[bool] = False


@dataclass(frozen=True)
class RecordPlan(Action):
    """Store plan ``version`` with its reason; ``changes`` says what moved since the last one."""

    plan: Plan
    version: int
    reason: str
    changes: tuple[Decision, ...] = ()
    type: ClassVar[str] = "record_plan"
    expects_observation: ClassVar[bool] = False


@dataclass(frozen=True)
class SkipStep(Action):
    step_id: str
    type: ClassVar[str] = "skip_step"
    expects_observation: ClassVar[bool] = False


@dataclass(frozen=True)
class Finish(Action):
    """The run is over. ``ok=False`` carries ``error``; :meth:`raise_for_error` raises it."""

    ok: bool
    answer: str | None = None
    outputs: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    # documents the answer saw only through search hits (onebox.agent.sources.excerpts)
    excerpts: tuple[Mapping[str, Any], ...] = ()
    type: ClassVar[str] = "finish"
    expects_observation: ClassVar[bool] = False

    def raise_for_error(self) -> None:
        if not self.ok:
            raise AgentError(self.error or "the agent failed")


# ------------------------------------------------------------------------ observations


@dataclass(frozen=True)
class Observation:
    action_id: str
    type: ClassVar[str] = "observation"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            out[f.name] = _jsonable(getattr(self, f.name))
        return out


@dataclass(frozen=True)
class ModelReply(Observation):
    response: ChatResponse
    type: ClassVar[str] = "model_reply"


@dataclass(frozen=True)
class CheckResult(Observation):
    ok: bool
    message: str = ""
    type: ClassVar[str] = "check_result"


@dataclass(frozen=True)
class ToolsResult(Observation):
    """The ranked tools for the planning prompt, and ``names``: every tool in the catalog
    (a plan naming any other tool is refused)."""

    tools: tuple[ToolHint, ...] = ()
    names: tuple[str, ...] = ()
    type: ClassVar[str] = "tools_result"


@dataclass(frozen=True)
class StepResult(Observation):
    """How one step attempt ended. A ``result`` mapping with a ``replan`` key asks for a replan."""

    ok: bool
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    result: Any = None
    files: tuple[str, ...] = ()
    error: str | None = None
    timed_out: bool = False
    file_bytes: tuple[int | None, ...] = ()  # the size of each of ``files``, when known
    duration_ms: float | None = None
    type: ClassVar[str] = "step_result"

    def output(self) -> dict[str, Any]:
        """What later steps and expressions see as this step's output."""
        return {"ok": self.ok, "exit_code": self.exit_code, "stdout": self.stdout,
                "stderr": self.stderr, "result": self.result, "files": list(self.files),
                "error": self.error}


def observation_from_dict(data: Mapping[str, Any]) -> Observation:
    """Rebuild an observation stored with :meth:`Observation.to_dict` (for replay)."""
    kind = data.get("type")
    body = {k: v for k, v in data.items() if k != "type"}
    if kind == "model_reply":
        return ModelReply(body["action_id"], ChatResponse.from_dict(body["response"]))
    if kind == "check_result":
        return CheckResult(**body)
    if kind == "tools_result":
        return ToolsResult(body["action_id"], tuple(ToolHint(**t) for t in body.get("tools", ())),
                           tuple(body.get("names") or ()))
    if kind == "step_result":
        body["files"] = tuple(body.get("files") or ())
        body["file_bytes"] = tuple(body.get("file_bytes") or ())
        return StepResult(**body)
    raise AgentError(f"unknown observation type {kind!r}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Plan):
        return value.to_data()
    if isinstance(value, Step):
        return value.model_dump(mode="json", exclude_defaults=True)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
