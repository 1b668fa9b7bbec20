"""Step kinds: how a worker performs and archives one claimed attempt.

The engine claims attempts from the queue, keeps their leases and stops them; what an
attempt *is* belongs to its kind. A plan's code step, an action of the agent and a thread
turn's upkeep are three kinds, and each plugs in here the way a third party's would: as an
entry point of the ``onebox.step_kinds`` group (the built-in ones are declared in
pyproject.toml) or with :func:`register`. The engine never imports a kind's module by name,
so it knows none of its users.

A kind says which claimed rows are its own (:meth:`StepKind.handles`; the kind with the
highest ``priority`` that handles a row takes it), performs the attempt outside any
transaction, archives the outcome (and queues what follows) in one, and decides what
follows when the attempt's worker was lost (:meth:`StepKind.lost`). A kind may also
continue a run whose agent has answered (:meth:`StepKind.continues`): a thread turn
remembers the turn before its run ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from onebox.config import Settings
from onebox.errors import ConfigError
from onebox.store import runs as store
from onebox.store.db import Database

if TYPE_CHECKING:
    from onebox.llm.base import ChatModel
    from onebox.runtime.engine.archive import Outcome
    from onebox.runtime.engine.executor import StepRunner
    from onebox.sandbox.base import SandboxBackend

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "onebox.step_kinds"
CHORES_GROUP = "onebox.chores"
Chore = Callable[[Database, Settings], Awaitable[bool]]


@dataclass(frozen=True)
class Performed:
    """What performing an attempt gave: its outcome, and for a kind that observes (the
    agent) its observation of it (None: no observation, the attempt failed around it)."""

    observation: object | None
    outcome: Outcome


@dataclass
class Worker:
    """What a kind may use of the worker that claimed the attempt."""

    db: Database
    settings: Settings
    backend: SandboxBackend
    runner: StepRunner
    chat_model: Callable[[Mapping[str, Any] | None], ChatModel]


class StepKind(Protocol):
    name: str
    priority: int  # higher first: a kind whose rows another kind would also take goes first
    interruptible: bool  # stopping the attempt cancels `perform` (else only its sandbox call)

    def handles(self, row: store.Row) -> bool:
        """Whether a claimed attempt is this kind's."""

    async def perform(self, worker: Worker, row: store.Row) -> Performed:
        """Do the attempt's work (no transaction is open)."""

    async def archive(self, worker: Worker, row: store.Row, performed: Performed) -> str | None:
        """Record the attempt and queue what follows; the run's new terminal state, if any."""

    async def lost(self, conn: store.Conn, settings: Settings, run: store.Row,
                   row: store.Row) -> None:
        """The attempt's lease expired (its worker was lost), inside the recovery's
        transaction: retry it, or decide what its loss means for the run."""

    def continues(self, run: store.Row) -> bool:
        """Whether this kind goes on with ``run`` once its agent has answered (the kind
        then ends the run itself) instead of the run ending with the answer."""

    async def after_answer(self, conn: store.Conn, run: store.Row) -> None:
        """Go on with a run :meth:`continues` took, in the answer's transaction."""


_kinds: dict[str, StepKind] = {}
_loaded = False
_chores: dict[str, Chore] | None = None


def register(kind: StepKind) -> None:
    """Add (or replace, by name) a step kind in this process."""
    _kinds[kind.name] = kind


def kinds() -> list[StepKind]:
    """Every kind of this process, highest priority first (entry points loaded once)."""
    global _loaded
    if not _loaded:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            if point.name not in _kinds:
                _kinds[point.name] = point.load()
        _loaded = True
    return sorted(_kinds.values(), key=lambda k: -k.priority)


def chores() -> dict[str, Chore]:
    """Periodic work a worker serving the whole queue does every few seconds, by name (the
    ``onebox.chores`` entry points: firing due schedules is one). A chore returns True when
    it queued work, so the worker looks for it at once."""
    global _chores
    if _chores is None:
        _chores = {p.name: p.load() for p in entry_points(group=CHORES_GROUP)}
    return _chores


def kind_of(row: store.Row) -> StepKind:
    for kind in kinds():
        if kind.handles(row):
            return kind
    raise ConfigError(
        f"no step kind handles attempt {row.get('id')} (step {row.get('step_id')!r}); the "
        f"installed kinds are {sorted(_kinds) or 'none'}. Fix: reinstall onebox "
        f"(`pip install -e .` registers the {ENTRY_POINT_GROUP!r} entry points)")


def continuing(run: store.Row) -> StepKind | None:
    """The kind that goes on with a run whose agent answered, if one does."""
    return next((kind for kind in kinds() if kind.continues(run)), None)
