"""Running one claimed code step in the sandbox and turning the result into an Outcome."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onebox.agent.plan import Step
from onebox.config import Settings
from onebox.errors import OneboxError, SandboxError, ValidationError, WorkspaceConflict
from onebox.runtime.engine.archive import Outcome, outcome_from_result
from onebox.runtime.engine.live_logs import LiveLog
from onebox.runtime.engine.step_knowledge import StepKnowledge
from onebox.runtime.engine.tracing import span
from onebox.runtime.engine.workspaces import StepWorkspace
from onebox.runtime.environments import service as environments
from onebox.sandbox import policy
from onebox.sandbox.base import (
    EnvironmentLayer,
    ExecRequest,
    ExecResult,
    Limits,
    NetworkPolicy,
    SandboxBackend,
)
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)
STOP_GRACE_S = 5.0  # an interrupted sandbox call that has not returned by then is cancelled


def build_request(step: Step, row: store.Row, settings: Settings, *,
                  files: Mapping[str, bytes] | None = None,
                  env: Mapping[str, str] | None = None) -> ExecRequest:
    """The sandbox request for one attempt: the step's code, limits and network grant (the
    one place a step's limits are resolved), with the files and environment it is given."""
    lim = step.limits
    return ExecRequest(
        session_id=row["session_id"],
        code=step.code,
        language=step.tool or "python",
        limits=Limits(
            timeout_s=lim.timeout_s, memory_mb=lim.memory_mb, cpus=lim.cpus, pids=lim.pids,
            disk_mb=lim.disk_mb,
        ),
        network=NetworkPolicy(allow_domains=step.allow_domains),
        trace_id=row["trace_id"],
        files=dict(files or {}),
        env=dict(env or {}),
    )


def request_details(step: Step, request: ExecRequest, settings: Settings) -> dict[str, Any]:
    """What is needed to replay the attempt later: code, language, the limits it ran under
    (resolved by :func:`onebox.sandbox.policy.resolve_limits`, as the backend resolves
    them: the output bound included), grants."""
    return {
        "code": step.code,
        "language": step.tool,
        "limits": dataclasses.asdict(policy.resolve_limits(settings.sandbox, request.limits)),
        "allow_domains": list(step.allow_domains),
        "environment": step.environment,
    }


@dataclass
class Ran:
    """One code step's attempt: its outcome, and the sandbox's result if it ran."""

    outcome: Outcome
    result: ExecResult | None = None


class StepRunner:
    """The one step pipeline for code: the workspace before, the sandbox, the workspace
    after, declared knowledge. Plan steps and the agent's steps both run through it.

    ``running`` and ``stops`` are the worker's: the sandbox call of each attempt is
    registered in ``running`` under its execution id, and a worker that must stop it
    (the run was cancelled, the lease was lost) puts the reason in ``stops`` and cancels
    it; the attempt then ends FAILED with that reason and its workspace is still saved.
    """

    def __init__(self, backend: SandboxBackend, settings: Settings,
                 workspaces: StepWorkspace | None, knowledge: StepKnowledge,
                 running: dict[uuid.UUID, asyncio.Task[Any]] | None = None,
                 stops: dict[uuid.UUID, str] | None = None,
                 db: Database | None = None) -> None:
        self.backend, self.settings, self.db = backend, settings, db
        self.workspaces, self.knowledge = workspaces, knowledge
        self.running = running if running is not None else {}
        self.stops = stops if stops is not None else {}

    async def run(self, step: Step, row: store.Row, *, files: Mapping[str, bytes] | None = None,
                  env: Mapping[str, str] | None = None) -> Ran:
        request = build_request(step, row, self.settings, files=files, env=env)
        details = request_details(step, request, self.settings)
        if step.environment is not None:
            try:
                request = dataclasses.replace(request, environment=await self._layer(step, row))
            except OneboxError as exc:
                return Ran(Outcome("FAILED", error=str(exc), details=details))
        if self.workspaces is None:
            ran = await self._sandboxed(request, row, details)
        else:
            try:
                async with self.workspaces.using(row):
                    ran = await self._sandboxed(request, row, details)
                    await self.workspaces.after(row, failed=ran.outcome.status != "SUCCESS")
            except WorkspaceConflict as exc:  # the plan fails on overwrites: nothing ran
                return Ran(Outcome("FAILED", error=f"{exc.code}: {exc.message}",
                                   details=details))
            ran.outcome = dataclasses.replace(ran.outcome,
                                              commit=self.workspaces.commit_for(row))
        if step.knowledge and ran.outcome.status == "SUCCESS":
            added = await self.knowledge.ingest(
                row, self.backend.workspace(row["session_id"]), step.knowledge)
            ran.outcome = dataclasses.replace(
                ran.outcome, details={**ran.outcome.details, "knowledge": added})
        return ran

    async def _sandboxed(self, request: ExecRequest, row: store.Row,
                         details: dict[str, Any]) -> Ran:
        task = asyncio.create_task(self._execute(request, row, details))
        self.running[row["id"]] = task
        try:
            ran = await task
        except asyncio.CancelledError:
            if row["id"] not in self.stops:
                raise
            return Ran(Outcome("FAILED", error=self.stops[row["id"]], details=details))
        finally:
            self.running.pop(row["id"], None)
        reason = self.stops.get(row["id"])
        if reason is not None and ran.outcome.status != "SUCCESS":
            # interrupted: the output so far is kept, the reason is the stop's
            ran.outcome = dataclasses.replace(ran.outcome, status="FAILED", error=reason)
        return ran

    async def stop(self, row: store.Row, reason: str, *, interrupt: bool,
                   grace_s: float = STOP_GRACE_S) -> None:
        """Stop an attempt. ``interrupt`` (its run was cancelled) kills the session's
        processes so the sandbox call returns with what it has: a step that had already
        finished keeps its real result. Otherwise (or past ``grace_s``) it is cancelled."""
        task = self.running.get(row["id"])
        if task is None or task.done():
            return
        self.stops[row["id"]] = reason
        if interrupt and self.backend.interrupt(row["session_id"]):
            done, _ = await asyncio.wait({task}, timeout=grace_s)
            if done:
                return
        task.cancel()

    async def _execute(self, request: ExecRequest, row: store.Row,
                       details: dict[str, Any]) -> Ran:
        """A failure of the sandbox itself is a FAILED outcome, not a crash. The output is
        streamed as it is printed (live logs, written before the step's own event)."""
        live = self._live_log(row)
        try:
            with span("sandbox.exec", row["trace_id"], backend=self.backend.name,
                      session=row["session_id"]):
                if live is not None:
                    request = dataclasses.replace(request, on_output=live.feed)
                try:
                    result = await self.backend.execute(request)
                finally:
                    if live is not None:
                        await live.close()
        except Exception as exc:
            log.warning("sandbox could not run step %s: %s", row["step_id"], exc,
                        exc_info=not isinstance(exc, SandboxError))
            return Ran(Outcome("FAILED", error=sandbox_failure(exc), details=details))
        return Ran(outcome_from_result(result, details), result)


    async def _layer(self, step: Step, row: store.Row) -> EnvironmentLayer:
        """The step's environment layer, of its run's tenant."""
        if self.db is None:
            raise ValidationError("a step with an environment needs the database",
                                  field="environment")
        return await environments.step_layer(self.db, self.settings, row["run_id"],
                                             str(step.environment))

    def _live_log(self, row: store.Row) -> LiveLog | None:
        if self.db is None or self.settings.runtime.live_log_max_bytes <= 0:
            return None
        return LiveLog(self.db, row, self.settings.runtime)


def sandbox_failure(exc: Exception) -> str:
    """The reason a backend could not run a step. A SandboxError says it in its message;
    anything else (an OSError of a cgroup write, a bug) is named with its type."""
    if isinstance(exc, SandboxError):
        return f"sandbox error: {exc}"
    return f"sandbox error: {type(exc).__name__}: {exc}"
