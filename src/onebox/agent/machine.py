"""The agent's plumbing: state, the observe/outstanding protocol, issuing actions.

:class:`AgentBase` holds the state and turns handlers into the action/observation
protocol of :mod:`onebox.agent.actions`; :mod:`onebox.agent.codesteps` adds model-written
code, and :class:`onebox.agent.loop.Agent` the planning, scheduling and replanning.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from onebox.agent import prompting as p
from onebox.agent.actions import (
    Action,
    CallModel,
    CheckCode,
    CheckResult,
    Decision,
    Finish,
    Intent,
    LookupTools,
    ModelReply,
    Observation,
    StepAction,
    StepResult,
    ToolHint,
    ToolsResult,
)
from onebox.agent.context import SandboxFacts
from onebox.agent.plan import Plan, Step
from onebox.agent.state import AgentConfig, Instance, StepState
from onebox.errors import AgentError, OneboxError

Handler = Callable[[Any], None]
A = TypeVar("A", bound=Action)
EXPECTS: dict[type[Action], type[Observation]] = {
    CallModel: ModelReply, CheckCode: CheckResult, LookupTools: ToolsResult,
}


class AgentBase(abc.ABC):
    def __init__(self, request: str = "", *, plan: Plan | None = None,
                 config: AgentConfig | None = None, tools: Sequence[ToolHint] = (),
                 facts: SandboxFacts | None = None,
                 files: Mapping[str, int | None] | None = None) -> None:
        if not request and plan is None:
            raise AgentError("give the agent a request or a plan")
        self.request = request
        self.config = config or AgentConfig()
        self.tools = tuple(tools)
        self.tool_names: set[str] = {t.name for t in tools}
        self.facts = facts
        self.files: dict[str, int | None] = dict(files or {})
        self.intent: Intent | None = None
        self.plan: Plan | None = None
        self.version = 0
        self.steps: dict[str, StepState] = {}
        self.history: list[Action] = []
        self.decisions: list[Decision] = []
        self.result: Finish | None = None
        self._given_plan = plan
        self._order: list[str] = []
        self._steps_by_id: dict[str, Step] = {}
        self._shared_code: dict[str, str] = {}
        self._code_waiters: dict[str, list[Instance]] = {}
        self._waiting_ids: list[str] = []
        self._count = 0
        self._out: list[Action] = []
        self._waiting: dict[str, tuple[Action, Handler]] = {}
        self._queue: list[Instance] = []
        self._active = 0
        self._executions: dict[str, int] = {}
        self._replans = 0
        self._replanning = False
        self._blocked: tuple[str, str] | None = None
        self._started = False

    @property
    def finished(self) -> bool:
        return self.result is not None

    def observe(self, observation: Observation) -> list[Action]:
        """Feed back what happened to one action; returns the actions issued in response."""
        entry = self._waiting.get(observation.action_id)
        if entry is None:
            raise AgentError(f"no action {observation.action_id!r} is waiting for an observation")
        action, handler = entry
        expected = StepResult if isinstance(action, StepAction) else EXPECTS[type(action)]
        if not isinstance(observation, expected):
            raise AgentError(f"action {action.id} ({action.type}) needs a {expected.__name__}, "
                             f"got {type(observation).__name__}")
        del self._waiting[observation.action_id]
        if not self.finished:
            handler(observation)
            self._pump()
        return self._drain()

    def outstanding(self) -> list[Action]:
        """Issued actions still waiting for their observation (to perform after a resume)."""
        return [action for action, _ in self._waiting.values()]

    def _issue(self, cls: type[A], decision: Decision, handler: Handler | None = None,
               **fields: Any) -> A:
        """Create the next action (ids a1, a2, ...); remember its handler if it expects one."""
        self._count += 1
        action = cls(id=f"a{self._count}", decision=decision, **fields)
        self._out.append(action)
        self.history.append(action)
        self.decisions.append(decision)
        if action.expects_observation:
            assert handler is not None, f"{cls.__name__} needs a handler"
            self._waiting[action.id] = (action, handler)
        return action

    def _step(self, step_id: str) -> Step:
        return self._steps_by_id[step_id]

    def _drain(self) -> list[Action]:
        out, self._out = self._out, []
        return out

    def _ask_json(self, purpose: str, request: Any, parse: Callable[[Any], Any],
                  on_ok: Handler, decision: Decision, repairs: int = 0) -> None:
        """A model call whose reply is parsed; an unusable reply is fed back, bounded."""

        def on_reply(obs: ModelReply) -> None:
            try:
                value = parse(obs.response)
            except (ValueError, RecursionError, OneboxError) as exc:  # JSON nested too deeply
                if repairs >= self.config.max_plan_repairs:
                    self._fail(f"the model's {purpose} reply was still unusable after "
                               f"{repairs} repairs: {exc}")
                    return
                why = Decision("repair", f"{purpose} reply unusable ({exc}); asking again "
                               f"({repairs + 1}/{self.config.max_plan_repairs})")
                self._ask_json(purpose, p.repair_request(request, obs.response, str(exc)),
                               parse, on_ok, why, repairs + 1)
                return
            on_ok(value)

        kind = purpose if repairs == 0 else f"repair_{purpose}"
        self._issue(CallModel, decision, on_reply, purpose=kind, request=request)

    def _names(self, step: Step, inst: Instance | None = None) -> dict[str, Any]:
        names: dict[str, Any] = {d: self.steps[d].output for d in step.depends_on}
        if inst is not None:
            names.update(inst.loop_names())
        return names

    # hooks the concrete agent provides
    @abc.abstractmethod
    def _pump(self) -> None:
        """Start whatever can start now; finish the run when nothing is left."""

    @abc.abstractmethod
    def _execute(self, inst: Instance) -> None:
        """Issue the next attempt of ``inst``."""

    @abc.abstractmethod
    def _instance_failed(self, inst: Instance, reason: str, replan: bool = True) -> None:
        """``inst`` failed for good."""

    @abc.abstractmethod
    def _abandon(self, inst: Instance) -> None:
        """Drop ``inst`` without a result (a replan or failure is pending)."""

    @abc.abstractmethod
    def _fail(self, reason: str) -> None:
        """Finish the run with ``ok=False``."""
