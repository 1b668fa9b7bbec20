"""What the MCP tools do, for one tenant: thin compositions of the service functions the
HTTP API and the CLI call (sessions, runs and their files, knowledge and memory).

Results are plain JSON-able dicts an agent can read; outputs are bounded so one tool
result never floods the model's context.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from onebox.errors import ValidationError
from onebox.knowledge import tenant_service as tenant_knowledge
from onebox.mcp.state import McpState
from onebox.runtime.engine import run_files, run_outputs
from onebox.runtime.engine.run_files import RunFile
from onebox.runtime.services import forks, replays, run_compare
from onebox.runtime.services import run_service as tenant_runs
from onebox.runtime.services import runs as runtime_runs
from onebox.runtime.services import session_service as sessions
from onebox.runtime.services.cell_stream import cell_json
from onebox.store.runs import TERMINAL_RUN_STATES

MAX_TEXT_CHARS = 20_000  # stdout/stderr/answer kept in one tool result
MAX_STEPS_SHOWN = 50
POLL_S = 0.5
Progress = Callable[[float, float | None, str], Awaitable[None]]


def clip(text: str | None, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    if text is None or len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n... [{len(text) - max_chars} more characters cut]"


async def create_session(state: McpState, tenant_id: str) -> dict[str, Any]:
    row = await sessions.create_session(state.runtime.db, state.runtime.backend, tenant_id)
    return {"session_id": row["id"], "created_at": str(row.get("created_at"))}


async def close_session(state: McpState, tenant_id: str, session_id: str) -> dict[str, Any]:
    db, backend = state.runtime.db, state.runtime.backend
    await sessions.require_session(db, session_id, tenant_id)
    await sessions.delete_session(db, backend, session_id, tenant_id)
    return {"session_id": session_id, "closed": True}


async def execute_code(
    state: McpState, tenant_id: str, *, code: str, language: str, session_id: str | None,
    timeout_s: float | None, allow_domains: list[str],
) -> dict[str, Any]:
    """Run in the given session (its files, and python's variables, persist), or in a
    throwaway one."""
    db = state.runtime.db
    if session_id is not None:
        await sessions.require_session(db, session_id, tenant_id)
        return await _execute_in(state, session_id, code, language, timeout_s, allow_domains)
    made = await create_session(state, tenant_id)
    try:
        return {**await _execute_in(state, made["session_id"], code, language, timeout_s,
                                    allow_domains), "session_id": None}
    finally:
        await sessions.delete_session(db, state.runtime.backend, made["session_id"], tenant_id)


async def _execute_in(state: McpState, session_id: str, code: str, language: str,
                      timeout_s: float | None, allow_domains: list[str]) -> dict[str, Any]:
    if language == "python":
        return await _run_cell(state, session_id, code, timeout_s, allow_domains)
    result = await sessions.execute(
        state.runtime.db, state.runtime.backend, session_id, code=code, language=language,
        timeout_s=timeout_s, memory_mb=None, allow_domains=allow_domains, stdin=None)
    return {"session_id": session_id, "exit_code": result.exit_code,
            "stdout": clip(result.stdout), "stderr": clip(result.stderr),
            "error": result.error, "timed_out": result.timed_out,
            "duration_ms": result.duration_ms, "files_written": list(result.files_written)}


async def _run_cell(state: McpState, session_id: str, code: str, timeout_s: float | None,
                    allow_domains: list[str]) -> dict[str, Any]:
    """Python in the session's stateful interpreter; ``value`` is the last expression's
    text, ``results`` every rich output (PNG, HTML, JSON...) by MIME type."""
    result = await sessions.run_cell(state.runtime.db, state.runtime.backend, session_id,
                                     code=code, timeout_s=timeout_s, allow_domains=allow_domains)
    data = cell_json(result)
    main = [r for r in result.results if r.is_main_result]
    value = main[0].data.get("text/plain") if main else None
    return {**data, "session_id": session_id, "stdout": clip(data["stdout"]),
            "stderr": clip(data["stderr"]), "value": clip(value)}


async def submit(state: McpState, tenant_id: str, *, plan: dict[str, Any] | None,
                 task: str | None, profile: str | None = None,
                 files: dict[str, str] | None = None) -> dict[str, Any]:
    inputs = await _stage_inputs(state, tenant_id, files or {})
    made = await tenant_runs.create_run(
        state.runtime.db, state.settings, tenant_id, plan=plan, task=task, name=None,
        idempotency_key=None, profile=profile, inputs=inputs)
    return {"run_id": str(made.run_id), "trace_id": made.trace_id}


async def _stage_inputs(state: McpState, tenant_id: str,
                        files: dict[str, str]) -> list[RunFile]:
    names = {run_files.check_name(name, field="files") for name in files}
    data = {name: text.encode() for name, text in files.items()}
    run_files.check_caps([len(b) for b in data.values()], state.settings.runtime)
    staged = [await run_files.stage(state.runtime.db, state.runtime.objects, tenant_id, name,
                                    data[name]) for name in sorted(names)]
    return [f for _, f in staged]


def run_uuid(run_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(run_id)
    except ValueError:
        raise ValidationError(f"run_id {run_id[:60]!r} is not a run id (a UUID, as run_task "
                              "and run_plan return)", field="run_id") from None


async def get_run(state: McpState, tenant_id: str, run_id: str) -> dict[str, Any]:
    rid = run_uuid(run_id)
    await tenant_runs.require_run(state.runtime.db, rid, tenant_id)
    return await _run_view(state, rid)


async def _run_view(state: McpState, run_id: uuid.UUID) -> dict[str, Any]:
    db = state.runtime.db
    run = await runtime_runs.get_run(db, run_id)
    page = await runtime_runs.steps_page(db, run_id, limit=MAX_STEPS_SHOWN)
    return {"run_id": str(run_id), "name": run.get("name"), "status": run["status"],
            "answer": clip(run.get("answer")), "error": run.get("error"),
            "finished": run["status"] in TERMINAL_RUN_STATES,
            "summary": await runtime_runs.run_summary(db, run_id),
            "steps": [_step(s) for s in page["steps"]], "more_steps": page["next"] is not None}


def _step(row: dict[str, Any]) -> dict[str, Any]:
    return {"step_id": row["step_id"], "attempt": row["attempt"], "status": row["status"],
            "exit_code": row.get("exit_code"), "stdout": clip(row.get("stdout"), 4000),
            "stderr": clip(row.get("stderr"), 4000), "error": row.get("error")}


async def wait_run(state: McpState, tenant_id: str, run_id: str, timeout_s: float,
                   progress: Progress) -> dict[str, Any]:
    """Follow the run until it ends or ``timeout_s`` passes (then finished=false)."""
    rid = run_uuid(run_id)
    await tenant_runs.require_run(state.runtime.db, rid, tenant_id)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        view = await _run_view(state, rid)
        done = sum(view["summary"]["steps"].get(s, 0) for s in ("SUCCEEDED", "FAILED", "SKIPPED"))
        total = sum(view["summary"]["steps"].values()) or None
        await progress(done, total, f"run {run_id}: {view['status']}")
        if view["finished"] or asyncio.get_running_loop().time() >= deadline:
            return view
        await asyncio.sleep(POLL_S)


async def run_files_of(state: McpState, tenant_id: str, run_id: str) -> dict[str, Any]:
    rid = run_uuid(run_id)
    await tenant_runs.require_run(state.runtime.db, rid, tenant_id)
    return {"run_id": run_id, "files": await run_outputs.manifest(state.runtime.db, rid)}


async def read_run_file(state: McpState, tenant_id: str, run_id: str, path: str,
                        max_bytes: int) -> dict[str, Any]:
    """A kept output as text (UTF-8) or base64, at most ``max_bytes``."""
    rid = run_uuid(run_id)
    await tenant_runs.require_run(state.runtime.db, rid, tenant_id)
    data = await run_outputs.artifact(state.runtime.db, state.runtime.objects, rid, path)
    part = data[:max_bytes]
    out: dict[str, Any] = {"path": path, "size_bytes": len(data), "truncated": len(data) > len(part)}
    try:
        return {**out, "encoding": "utf-8", "content": part.decode("utf-8")}
    except UnicodeDecodeError:
        return {**out, "encoding": "base64", "content": base64.b64encode(part).decode()}


async def search_knowledge(state: McpState, tenant_id: str, query: str,
                           collection: str | None, k: int) -> dict[str, Any]:
    hits = await tenant_knowledge.search(
        await state.knowledge(), tenant_id, query=query, k=k,
        collections=[collection] if collection else None, metadata=None)
    return {"query": query, "hits": hits}


async def remember(state: McpState, tenant_id: str, text: str, scope: str) -> dict[str, Any]:
    if not text.strip():
        raise ValidationError("text is empty: give the fact to remember", field="text")
    record = await tenant_knowledge.remember(await state.knowledge(), tenant_id, scope=scope,
                                             content=text, user_id="", kind="short",
                                             metadata={})
    return {"id": str(record["id"]), "scope": scope, "deduplicated": record["deduplicated"]}


async def recall(state: McpState, tenant_id: str, query: str, scope: str,
                 k: int) -> dict[str, Any]:
    if not query.strip():
        raise ValidationError("query is empty: say what to recall", field="query")
    hits = await tenant_knowledge.recall(await state.knowledge(), tenant_id, scope=scope,
                                         query=query, k=k, user_id="",
                                         include_superseded=False)
    return {"scope": scope, "query": query, "memories": hits}


async def fork(state: McpState, tenant_id: str, run_id: str, at: str,
               changes: dict[str, Any] | None, profile: str | None = None) -> dict[str, Any]:
    """A fork of a finished run at a step (runtime/services/forks)."""
    rt = state.runtime
    forked = await forks.fork_run(rt.db, rt.settings, run_uuid(run_id), tenant_id, at=at,
                                  changes=changes or {}, profile=profile)
    return forks.fork_json(forked)


async def replay(state: McpState, tenant_id: str, run_id: str) -> dict[str, Any]:
    """Every code step of a finished run replayed from its own inputs, as a run the
    server's worker executes (runtime/services/replays); waits for it up to two minutes."""
    rt = state.runtime
    replay_id = await replays.queue_replay(rt.db, run_uuid(run_id), tenant_id)
    report = await replays.wait_for_replay(rt.db, replay_id, tenant_id, 120.0)
    first = report["first_difference"]
    if first is not None:
        first = {**first, "stdout_diff": clip(first["stdout_diff"]),
                 "stderr_diff": clip(first["stderr_diff"])}
    return {**report, "first_difference": first}


async def diff(state: McpState, tenant_id: str, run_a: str, run_b: str) -> dict[str, Any]:
    """Two runs step by step (run_compare), the differing steps only."""
    rt = state.runtime
    found = await run_compare.diff_runs(rt.db, rt.objects, run_uuid(run_a), run_uuid(run_b),
                                        tenant_id)
    return {**found, "steps": [s for s in found["steps"] if not s["same"]]}
