"""Performing the agent's step actions: sandboxed code, knowledge, memory, approvals.

Every step instance attempt becomes a ``task_execution`` row (its ``step_id`` is the
instance, ``each[2]`` in a fan-out), started before the work and finished in the same
transaction that stores the agent's observation of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from onebox.agent.actions import (
    AskApproval,
    ExecuteStep,
    Observation,
    Recall,
    Remember,
    SearchKnowledge,
    StepAction,
    StepResult,
)
from onebox.agent.hashing import canonical_hash
from onebox.agent.plan import Step
from onebox.config import Settings
from onebox.errors import OneboxError, SandboxError
from onebox.knowledge.collections import list_collections, tenant_name, tenant_visible
from onebox.knowledge.search import SearchFilters
from onebox.runtime.archive import (
    Outcome,
    archive_failure,
    load_plan_index,
    outcome_from_result,
    step_params,
)
from onebox.runtime.executor import build_request, request_details, sandbox_failure
from onebox.runtime.step_knowledge import StepKnowledge
from onebox.runtime.submit import queue_attempt, request_approval, session_id_for
from onebox.runtime.tools import expand_tool_step
from onebox.sandbox import hostfs
from onebox.sandbox.capture import safe_text
from onebox.store import catalog
from onebox.store import runs as store

if TYPE_CHECKING:
    from onebox.runtime.agent_runs import TaskDriver

Finisher = Callable[[store.Conn], Awaitable[uuid.UUID | None]]
IO_DIR = ".onebox"
MAX_RESULT_BYTES = 8 << 20  # a $ONEBOX_RESULT file larger than this is ignored
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Performed:
    """An observation, and what to write in the transaction that stores it."""

    observation: Observation
    finish: Finisher | None = None


class StepPerformer:
    def __init__(self, driver: TaskDriver, settings: Settings) -> None:
        self.driver, self.settings = driver, settings
        self.declared = StepKnowledge(driver.db, settings)

    async def perform(self, action: StepAction) -> Performed:
        row = await self._start(action)
        try:
            if isinstance(action, ExecuteStep):
                result, outcome = await self._execute(action, row)
            else:
                result, outcome = await self._knowledge_step(action)
        except OneboxError as exc:
            outcome = Outcome("FAILED", error=f"{exc.code}: {exc.message}")
            result = StepResult(action.id, ok=False, error=outcome.error)
        return Performed(result, self._finisher(row, outcome))

    async def _start(self, action: StepAction) -> store.Row:
        d = self.driver
        async with d.fenced() as conn:
            earlier = await store.fetch_all(conn, "step_attempts", {
                "run_id": d.run_id, "step_id": action.instance})
            for stale in (r for r in earlier if r["status"] == "RUNNING"):
                lost = await store.fetch_one(conn, "abandon_agent_step", {"id": stale["id"]})
                if lost is not None:
                    await store.append_event(conn, d.run_id, "step_failed", _payload(lost),
                                             trace_id=lost["trace_id"], execution_id=lost["id"])
            plan_id, number = await self._plan_position(conn, action)
            step = getattr(action, "step", None)
            row = await store.fetch_one(conn, "start_agent_step", {
                "id": uuid.uuid4(), "run_id": d.run_id, "plan_id": plan_id,
                "session_id": session_id_for(d.run_id), "trace_id": d.run["trace_id"],
                "step_id": action.instance, "step_number": number,
                "attempt": len(earlier) + 1, "owner": d.owner,
                "tool_name": (step.tool or step.kind) if step is not None else action.type,
                "input_hash": canonical_hash(_action_input(action)),
                "details": Jsonb({"action_id": action.id, "decision": action.decision.to_dict()}),
            })
        assert row is not None
        return row

    async def _plan_position(self, conn: store.Conn, action: StepAction) -> tuple[uuid.UUID, int]:
        found = await store.fetch_one(conn, "plan_version_id", {
            "run_id": self.driver.run_id, "version": action.plan_version})
        assert found is not None, f"plan version {action.plan_version} was not stored"
        index = await load_plan_index(conn, found["id"])
        return found["id"], index.numbers.get(action.step_id, len(index.numbers) + 1)

    async def _execute(self, action: ExecuteStep, row: store.Row) -> tuple[StepResult, Outcome]:
        d = self.driver
        step = await self._runnable(action.step)
        key = action.instance.replace("/", "_")
        inputs_path, result_path = f"{IO_DIR}/{key}.inputs.json", f"{IO_DIR}/{key}.result.json"
        base = build_request(step, row, self.settings)
        request = type(base)(**{**base.__dict__,
                                "files": {inputs_path: json.dumps(action.inputs, default=str)
                                          .encode()},
                                "env": {"ONEBOX_INPUTS": f"/workspace/{inputs_path}",
                                        "ONEBOX_RESULT": f"/workspace/{result_path}"}})
        details = request_details(step, request, self.settings)
        if d.workspaces is not None:
            await d.workspaces.prepare(row)
            await d.workspaces.before(row)
        try:
            exec_result = await d.backend.execute(request)
        except Exception as exc:
            log.warning("sandbox could not run step %s: %s", action.instance, exc,
                        exc_info=not isinstance(exc, SandboxError))
            outcome = Outcome("FAILED", error=sandbox_failure(exc), details=details)
            return StepResult(action.id, ok=False, error=outcome.error), outcome
        if d.workspaces is not None:
            await d.workspaces.after(row, failed=not exec_result.ok)
        declared = await asyncio.to_thread(_read_json, d.backend.workspace(row["session_id"]),
                                           result_path)
        outcome = outcome_from_result(exec_result, details)
        if step.knowledge and outcome.status == "SUCCESS":
            added = await self.declared.ingest(row, d.backend.workspace(row["session_id"]),
                                               step.knowledge)
            outcome = dataclasses.replace(outcome, details={**outcome.details, "knowledge": added})
        written = [f for f in exec_result.files_written if not f.path.startswith(IO_DIR)]
        files = tuple(f.path for f in written)
        return StepResult(
            action.id, ok=outcome.status == "SUCCESS", exit_code=exec_result.exit_code,
            stdout=exec_result.stdout, stderr=exec_result.stderr, result=declared, files=files,
            error=None if outcome.status == "SUCCESS" else outcome.error,
            timed_out=exec_result.timed_out, duration_ms=exec_result.duration_ms,
            file_bytes=tuple(f.size for f in written)), outcome

    async def _runnable(self, step: Step) -> Step:
        """The code step the sandbox runs for a code, tool or http step."""
        if step.kind == "tool":
            async with self.driver.db.connection() as conn:
                tool = await catalog.get_tool(conn, str(step.input["name"]))
            return expand_tool_step(tool, step)
        if step.kind == "http":
            return step.model_copy(update={"kind": "code", "tool": "python",
                                           "code": _http_code(step.input)})
        return step

    async def _knowledge_step(self, action: StepAction) -> tuple[StepResult, Outcome]:
        k = await self.declared.knowledge()
        tenant = self.driver.run["tenant_id"]
        scope = tenant_name(tenant, getattr(action, "scope", None) or "default")
        result: Any
        if isinstance(action, SearchKnowledge):
            names = [c["name"] for c in await list_collections(self.driver.db)
                     if tenant_visible(c["name"], tenant)]
            hits = await k.search(action.query, action.top_k, SearchFilters(collections=names)) \
                if names else []
            result = [h.to_dict() for h in hits]
        elif isinstance(action, Remember):
            result = await k.memory.remember(scope, action.text)
        elif isinstance(action, Recall):
            recalled = await k.memory.recall(scope, action.query, action.top_k)
            result = [h.to_dict() for h in recalled]
        else:
            raise AssertionError(f"not a knowledge action: {action.type}")
        text = json.dumps(result, default=str, ensure_ascii=False)
        outcome = Outcome("SUCCESS", exit_code=0, stdout=text[-64_000:],
                          output_hash=canonical_hash({"result": json.loads(text)}))
        return StepResult(action.id, ok=True, exit_code=0, stdout=text, result=result), outcome

    def _finisher(self, row: store.Row, outcome: Outcome) -> Finisher:
        async def finish(conn: store.Conn) -> uuid.UUID | None:
            try:
                async with conn.transaction():  # a savepoint: a refused write is undone alone
                    return await _finish_step(conn, row, outcome)
            except psycopg.Error as exc:
                log.exception("step %s: the result could not be archived; recording the "
                              "attempt as FAILED", row["step_id"])
                return await _finish_step(conn, row, archive_failure(outcome, exc))
        return finish

    async def approval(self, action: AskApproval) -> Performed | None:
        """The decision on an approval, or None after asking for one (the run then waits)."""
        d = self.driver
        async with d.fenced() as conn:
            rows = await store.fetch_all(conn, "step_attempts", {
                "run_id": d.run_id, "step_id": action.instance})
            decided = [r for r in rows if r["status"] in ("SUCCESS", "FAILED")]
            if decided:
                last = decided[-1]
                approved = last["status"] == "SUCCESS"
                return Performed(StepResult(
                    action.id, ok=approved, error=last["error"],
                    result={"approved": approved, "by": last["details"].get("by"),
                            "comment": last["details"].get("comment")}))
            if not rows:
                plan_id, number = await self._plan_position(conn, action)
                execution_id = await queue_attempt(conn, {
                    "run_id": d.run_id, "plan_id": plan_id, "trace_id": d.run["trace_id"],
                    "step_id": action.instance, "step_number": number, "tool_name": "approval",
                    "input_hash": canonical_hash({"prompt": action.prompt}), "max_attempts": 1,
                }, attempt=1, delay_s=0.0, hold=True)
                await request_approval(conn, d.run_id, d.run["trace_id"], action.instance,
                                       action.prompt, execution_id)
        return None

    async def close(self) -> None:
        await self.declared.close()


async def _finish_step(conn: store.Conn, row: store.Row, outcome: Outcome) -> uuid.UUID | None:
    done = await store.fetch_one(conn, "finish_step", {
        "id": row["id"], "fencing_token": row["fencing_token"], **step_params(outcome),
        "details": Jsonb(outcome.details)})
    return None if done is None else done["id"]


def _action_input(action: StepAction) -> dict[str, Any]:
    data = action.to_dict()
    return {k: v for k, v in data.items() if k not in ("id", "decision", "attempt")}


def _payload(row: store.Row) -> dict[str, Any]:
    return {"execution_id": str(row["id"]), "step_id": row["step_id"], "attempt": row["attempt"],
            "status": row["status"], "error": row["error"]}


def _read_json(workspace: Path, rel: str) -> Any:
    """The result a step declared in ``$ONEBOX_RESULT``, or None. Read through the workspace
    root's fd: a symlink on any component, a FIFO, a device, or a file over
    ``MAX_RESULT_BYTES`` is refused before a byte is read."""
    try:
        with hostfs.root(workspace) as root_fd:
            data = hostfs.read_bounded(root_fd, rel, MAX_RESULT_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("step result %s ignored: %s", rel, exc)
        return None
    try:
        return _storable(json.loads(data))
    except (ValueError, RecursionError):
        return None


def _storable(value: Any) -> Any:
    """The declared result with every string jsonb can store (no NUL, no lone surrogate):
    it becomes part of the agent's observation event. Walked without recursion."""
    if isinstance(value, str):
        return safe_text(value)
    if not isinstance(value, dict | list):
        return value
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in list(items):
            if isinstance(item, str):
                node[key] = safe_text(item)
            elif isinstance(item, dict | list):
                stack.append(item)
        if isinstance(node, dict) and any(isinstance(k, str) and safe_text(k) != k for k in node):
            fixed = {safe_text(k): v for k, v in node.items()}
            node.clear()
            node.update(fixed)
    return value


def _http_code(spec: dict[str, Any]) -> str:
    """Python that performs the request through the egress proxy and prints the body."""
    return (
        "import json, urllib.request\n"
        f"spec = json.loads({json.dumps(json.dumps(spec, default=str))})\n"
        "body = spec.get('body')\n"
        "data = body.encode() if isinstance(body, str) else "
        "(json.dumps(body).encode() if body is not None else None)\n"
        "req = urllib.request.Request(spec['url'], data=data, method=spec.get('method', 'GET'),"
        " headers=spec.get('headers') or {})\n"
        "with urllib.request.urlopen(req, timeout=float(spec.get('timeout_s', 30))) as r:\n"
        "    print(r.read().decode('utf-8', 'replace'))\n"
    )
