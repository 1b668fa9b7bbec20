"""Task runs on the one engine: the agent as a reducer over its run's log.

Every action of the agent that needs work (a model call, a code check, a catalog lookup,
a sandboxed step, a knowledge or memory call) is a ``task_execution`` row on the queue:
claimed, leased, fenced and archived like any plan step, by any worker. When one
finishes, its worker stores the result and the agent's observation of it in one
transaction, under the run's lock (the run row first, then its attempts: the lock order
of every path), rebuilds the agent from the run's log, and queues what the agent issued
next. No worker keeps an agent in memory between steps, so an agent run's parallel steps
run on different workers and a worker that dies loses nothing but its lease.

The row of an agent action carries ``details.action_id``; its ``step_id`` is the plan
step instance for a step action, and ``<tool>:<purpose>#<action id>`` for model work
(``model:intent#a1``, ``model:code:load#a5``, ``check:load#a6``, ``lookup#a2``).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from onebox.agent.actions import (
    Action,
    AskApproval,
    CallModel,
    CheckCode,
    Finish,
    LookupTools,
    Observation,
    RecordIntent,
    RecordPlan,
    SkipStep,
    StepAction,
    StepResult,
    observation_from_dict,
)
from onebox.agent.context import SandboxFacts
from onebox.agent.hashing import canonical_hash
from onebox.agent.loop import Agent
from onebox.agent.plan import parse_plan
from onebox.agent.state import AgentConfig
from onebox.config import Settings
from onebox.runtime.engine import kinds
from onebox.runtime.engine.archive import finish_run
from onebox.runtime.engine.submit import (
    create_plan_version_once,
    queue_attempt,
    request_approval,
    run_session_id,
)
from onebox.runtime.models.profiles import needs_model
from onebox.store import runs as store

STORED_ACTION_KEYS = ("id", "type", "decision", "step_id", "instance", "attempt", "purpose",
                      "plan_version", "version", "reason", "changes", "ok", "answer", "error")
AGENT_CACHE_RUNS = 64  # runs whose agent a worker keeps between their steps
CATALOG_KINDS = {"final": "final_answer"}  # step kinds whose catalog tool has another name
WORK_TOOLS: dict[type[Action], str] = {CallModel: "model", CheckCode: "check",
                                        LookupTools: "lookup"}


def is_agent_row(row: store.Row) -> bool:
    """Whether a claimed attempt performs an agent action (rather than a plan file's step)."""
    details = row.get("details") or {}
    return isinstance(details, dict) and "action_id" in details


def agent_config(settings: Settings | None) -> dict[str, int]:
    """The agent's bounds for a new run, stored in its request: every replay of the run,
    on any worker, uses the same ones (a different bound could issue different actions)."""
    if settings is None:
        return {}
    return {"max_parallel": settings.runtime.concurrency,
            "max_attempts": settings.runtime.max_attempts}


def _config_of(run: store.Row) -> AgentConfig:
    stored = run["request"].get("agent") or {}
    default = AgentConfig()
    return AgentConfig(max_parallel=int(stored.get("max_parallel", default.max_parallel)),
                       max_attempts=int(stored.get("max_attempts", default.max_attempts)),
                       use_model=bool(stored.get("use_model", default.use_model)))


@dataclass
class Replayed:
    """The agent rebuilt from the log, the ids of the actions already stored, and the
    sequence number of the last log entry it has consumed."""

    agent: Agent
    stored: set[str] = field(default_factory=set)
    seq: int = 0

    def waiting(self, action_id: str) -> Action | None:
        return next((a for a in self.agent.outstanding() if a.id == action_id), None)

    def consume(self, rows: list[store.Row]) -> None:
        for row in rows:
            if row["type"] == "agent_action":
                self.stored.add(row["payload"]["id"])
            else:
                self.agent.observe(observation_from_dict(row["payload"]))
            self.seq = max(self.seq, row["seq"])


_agents: OrderedDict[uuid.UUID, Replayed] = OrderedDict()


async def replay(conn: store.Conn, run: store.Row, *, facts: SandboxFacts | None = None,
                 files: Mapping[str, int | None] | None = None) -> Replayed:
    """The run's agent as its log says (pure: no model, no sandbox).

    A worker keeps the agents of its recent runs (``AGENT_CACHE_RUNS``) and reads only the
    log entries after the last one a cached agent consumed; that entry must still be in the
    log (a transaction that wrote it and rolled back leaves it missing: the agent is then
    rebuilt from the whole log). ``facts`` and ``files`` word the prompts of the model calls
    the agent issues (a fresh agent is built for them); decisions, and so action ids,
    depend on the observations alone.
    """
    cached = _agents.pop(run["id"], None) if facts is None and files is None else None
    if cached is not None:
        rows = await store.fetch_all(conn, "agent_log", {"run_id": run["id"],
                                                         "from_seq": cached.seq})
        if rows and rows[0]["seq"] == cached.seq:
            cached.consume(rows[1:])
            return _keep(run["id"], cached)
    request = run["request"]
    given = parse_plan(request["plan"]) if "plan" in request else None
    replayed = Replayed(Agent(request.get("task", ""), plan=given, config=_config_of(run),
                              facts=facts, files=files))
    replayed.agent.start()
    replayed.consume(await store.fetch_all(conn, "agent_log", {"run_id": run["id"],
                                                               "from_seq": 0}))
    return replayed if facts is not None or files is not None else _keep(run["id"], replayed)


def _keep(run_id: uuid.UUID, replayed: Replayed) -> Replayed:
    """Cache an agent whose state is exactly the log up to its ``seq``. Code that changes
    it beyond the log (:func:`observe`, :func:`start`) takes it out first and keeps it
    again once every entry is written, so a failure in between caches nothing wrong."""
    _agents[run_id] = replayed
    _agents.move_to_end(run_id)
    while len(_agents) > AGENT_CACHE_RUNS:
        _agents.popitem(last=False)
    return replayed


async def _append(conn: store.Conn, run: store.Row, replayed: Replayed, type: str,
                  payload: dict[str, Any], **ids: Any) -> None:
    seq = await store.append_event(conn, run["id"], type, payload,
                                   trace_id=run["trace_id"], **ids)
    replayed.seq = max(replayed.seq, seq)


async def start(conn: store.Conn, run: store.Row) -> None:
    """Record the agent's first actions and queue their work (at submission)."""
    replayed = await replay(conn, run)
    _agents.pop(run["id"], None)
    await record(conn, run, replayed)
    _keep(run["id"], replayed)


async def take_over(conn: store.Conn, run: store.Row) -> None:
    """Queue the work of a run whose log was copied from another (a fork): the actions
    the copy stored and still waits for, then the actions the agent issues from there."""
    replayed = await replay(conn, run)
    _agents.pop(run["id"], None)
    for action in replayed.agent.outstanding():
        if action.id in replayed.stored:
            await _notice(conn, run, action, replayed.agent)
    await record(conn, run, replayed)
    _keep(run["id"], replayed)


async def observe(conn: store.Conn, run: store.Row,
                  execution_id: uuid.UUID | None, observation: Observation) -> str | None:
    """Store one observation and everything the agent does about it (the caller holds the
    run's lock). Returns the run's terminal state, if it ended. An observation the agent no
    longer waits for (already stored) is dropped."""
    replayed = await replay(conn, run)
    if replayed.waiting(observation.action_id) is None:
        return None
    _agents.pop(run["id"], None)  # changed beyond the log below: cached again once written
    replayed.agent.observe(observation)
    await _append(conn, run, replayed, "agent_observation", observation.to_dict(),
                  execution_id=execution_id)
    terminal = await record(conn, run, replayed)
    _keep(run["id"], replayed)
    return terminal


async def record(conn: store.Conn, run: store.Row,
                 replayed: Replayed) -> str | None:
    """Store the actions issued since the last record, with what each one causes."""
    terminal: str | None = None
    for action in replayed.agent.history:
        if action.id in replayed.stored:
            continue
        replayed.stored.add(action.id)
        await _append(conn, run, replayed, "agent_action", _summary(action))
        terminal = await _notice(conn, run, action, replayed.agent) or terminal
    return terminal


async def _notice(conn: store.Conn, run: store.Row, action: Action,
                  agent: Agent) -> str | None:
    trace = {"trace_id": run["trace_id"]}
    if isinstance(action, RecordIntent):
        await store.append_event(conn, run["id"], "intent", action.intent.to_dict(), **trace)
    elif isinstance(action, RecordPlan):
        await create_plan_version_once(conn, run["id"], run["trace_id"], action.plan,
                                       version=action.version, reason=action.reason)
    elif isinstance(action, SkipStep):
        await store.append_event(conn, run["id"], "step_skipped", {
            "step_id": action.step_id, "reason": action.decision.reason}, **trace)
    elif isinstance(action, Finish):
        return await _finish(conn, run, action, agent)
    elif isinstance(action, AskApproval):
        execution_id = await queue_action(conn, run, action, hold=True, agent=agent)
        await request_approval(conn, run["id"], run["trace_id"], action.instance,
                               action.prompt, execution_id)
    elif action.expects_observation:
        await queue_action(conn, run, action, agent=agent)
    return None


async def _finish(conn: store.Conn, run: store.Row, action: Finish, agent: Agent) -> str | None:
    """End the run with the agent's answer, unless a step kind goes on with it (a thread
    turn's upkeep, :mod:`onebox.runtime.engine.kinds`), which then ends it with this answer."""
    status = "SUCCEEDED" if action.ok else "FAILED"
    taker = kinds.continuing(run)
    if taker is not None:
        await _finished_event(conn, run, action)
        await taker.after_answer(conn, run)
        return None
    current = await store.fetch_one(conn, "get_run", {"run_id": run["id"]})
    assert current is not None
    await finish_run(conn, current, status, action.error, answer=run_answer(run, action, agent))
    await _finished_event(conn, run, action)
    return status


async def _finished_event(conn: store.Conn, run: store.Row, action: Finish) -> None:
    await store.append_event(conn, run["id"], "agent_finished", {
        "ok": action.ok, "answer": action.answer, "error": action.error,
        "outputs": {str(k): v for k, v in dict(action.outputs or {}).items()},
        "excerpts": [dict(e) for e in action.excerpts]},
        trace_id=run["trace_id"])


def run_answer(run: store.Row, action: Finish, agent: Agent) -> str | None:
    """What the run answers: a task run, the agent's Finish answer; a plan file, the answer
    of its ``final`` step when one ran (the last stdout of a plan's step is no answer)."""
    if not action.ok:
        return None
    if run["source"] != "plan":
        return action.answer
    outputs = dict(action.outputs or {})
    ran = [s.id for s in (agent.plan.steps if agent.plan else ()) if s.kind == "final"
           and s.id in outputs]
    return action.answer if ran else None


def step_id_of(action: Action) -> str:
    if isinstance(action, StepAction):
        return action.instance
    tool = WORK_TOOLS[type(action)]
    purpose = getattr(action, "purpose", None) if isinstance(action, CallModel) else None
    step = getattr(action, "step_id", None)
    label = ":".join(str(part) for part in (tool, purpose, step) if part)
    return f"{label}#{action.id}"


def tool_of(action: Action, spec: Mapping[str, Any] | None = None) -> str:
    """The catalog tool an action uses (so the catalog's success rates count it): a code
    step's language, a tool step's tool, a knowledge, memory or approval step's kind."""
    if not isinstance(action, StepAction):
        return WORK_TOOLS[type(action)]
    step = getattr(action, "step", None)
    if step is not None and step.kind == "tool":
        return str(step.input.get("name") or "tool")
    if step is not None:
        return step.tool or CATALOG_KINDS.get(step.kind, step.kind)
    kind = str((spec or {}).get("kind") or action.type)
    return CATALOG_KINDS.get(kind, kind)


async def queue_action(conn: store.Conn, run: store.Row, action: Action,
                       *, hold: bool = False, agent: Agent | None = None) -> uuid.UUID:
    """Queue the work of one action; a step instance run again is its next attempt."""
    step_id = step_id_of(action)
    last = await store.fetch_one(conn, "last_attempt_number", {"run_id": run["id"],
                                                               "step_id": step_id})
    plan_id, number, spec = await _plan_position(conn, run, action, agent)
    attempt = (last["attempt"] if last else 0) + 1
    base = {"run_id": run["id"], "plan_id": plan_id, "trace_id": run["trace_id"],
            "step_id": step_id, "step_number": number, "tool_name": tool_of(action, spec),
            "session_id": run_session_id(run),
            "input_hash": canonical_hash(_action_input(action)),
            "max_attempts": 1 if hold else attempt + _config_of(run).max_attempts - 1,
            "needs_model": needs_model(run.get("profile")) if isinstance(action, CallModel)
            else None}
    details = {"action_id": action.id, "decision": action.decision.to_dict()}
    return await queue_attempt(conn, base, attempt=attempt, delay_s=0.0, hold=hold,
                               details=details)


async def requeue(conn: store.Conn, row: store.Row, *, delay_s: float) -> uuid.UUID:
    """The same action once more, as the row's next attempt (its worker was lost, or the
    model provider failed)."""
    base = {k: row[k] for k in ("run_id", "plan_id", "trace_id", "step_id", "step_number",
                                "tool_name", "input_hash", "max_attempts", "needs_model", "session_id")}
    return await queue_attempt(conn, base, attempt=row["attempt"] + 1, delay_s=delay_s,
                               details={k: row["details"][k] for k in ("action_id", "decision")
                                        if k in row["details"]})


def is_agent_run(run: store.Row) -> bool:
    """Whether the agent schedules the run (a task, or a plan beyond the plan index)."""
    return "agent" in (run.get("request") or {})


async def retry_waiting(conn: store.Conn, run: store.Row, *, extra_attempts: int) -> list[str]:
    """Queue again every action the agent still waits for whose last attempt failed (a run
    that ended on a lost worker or a provider outage); returns their step ids."""
    queued = []
    for action in (await replay(conn, run)).agent.outstanding():
        attempts = await store.fetch_all(conn, "step_attempts", {
            "run_id": run["id"], "step_id": step_id_of(action)})
        last = attempts[-1] if attempts else None
        if last is None or last["status"] not in ("FAILED", "TIMEOUT"):
            continue
        await requeue(conn, {**last, "max_attempts": last["attempt"] + extra_attempts},
                      delay_s=0.0)
        queued.append(last["step_id"])
    return queued


async def after_failure(conn: store.Conn, run: store.Row, row: store.Row,
                        *, delay_s: float) -> str | None:
    """An agent action's attempt ended without an observation (its worker was lost, the
    model provider failed): try it again, and past its attempts tell the agent, or, for
    model work, end the run with the reason."""
    replayed = await replay(conn, run)
    action = replayed.waiting(row["details"]["action_id"])
    if action is None:  # observed already: nothing is waiting for this attempt
        return None
    if row["attempt"] < row["max_attempts"] and not row["details"].get("final"):
        await requeue(conn, row, delay_s=delay_s)
        return None
    reason = f"{row['step_id']} failed after {row['attempt']} attempt(s): {row['error']}"
    if isinstance(action, StepAction):
        return await observe(conn, run, row["id"],
                             StepResult(action.id, ok=False, error=row["error"] or reason))
    await finish_run(conn, run, "FAILED", reason)
    return "FAILED"


async def _plan_position(conn: store.Conn, run: store.Row, action: Action,
                         agent: Agent | None) -> tuple[uuid.UUID | None, int,
                                                       dict[str, Any] | None]:
    """The plan version the action belongs to, its step's number and spec there (from the
    agent's own plan when it is that version: a big plan is not read back per step)."""
    version = getattr(action, "plan_version", None)
    found = await store.fetch_one(conn, "agent_plan_id", {"run_id": run["id"],
                                                          "version": version})
    if found is None:
        return None, 0, None
    if agent is not None and agent.plan is not None and found["version"] == agent.version:
        plan_steps: list[Any] = list(agent.plan.steps)
        ids = [s.id for s in plan_steps]
    else:
        row = await store.fetch_one(conn, "plan_by_id", {"plan_id": found["id"]})
        assert row is not None
        plan_steps = list(row["spec"].get("steps") or [])
        ids = [s.get("id") for s in plan_steps]
    step_id = getattr(action, "step_id", None)
    if step_id is None or step_id not in ids:
        return found["id"], 0, None
    number = ids.index(step_id) + 1
    spec = plan_steps[number - 1]
    return found["id"], number, spec if isinstance(spec, dict) else {"kind": spec.kind}


def _action_input(action: Action) -> dict[str, Any]:
    data = action.to_dict()
    return {k: v for k, v in data.items() if k not in ("id", "decision", "attempt")}


def _summary(action: Action) -> dict[str, Any]:
    """The action as stored: what `onebox explain` needs, without large payloads."""
    data = action.to_dict()
    return {k: data[k] for k in STORED_ACTION_KEYS if k in data}
