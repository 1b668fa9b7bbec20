"""Two runs side by side, and a whole run replayed: the determinism check of a run.

    diff = await diff_runs(db, store, run_a, run_b, tenant_id)      # onebox diff A B
    report = await replay_run(db, backend, store, run_id, tenant_id)  # onebox replay RUN

:func:`diff_runs` aligns the steps by id (in the first run's plan order, then the second's
own), and for each says status, exit code and output hash on both sides, a unified diff of
stdout and stderr, the files whose content differs between the two steps' after-step
snapshots (:func:`workspace_diff.across`), and the model calls that differ (what was asked,
what was answered, tokens, cost). A step is ``same`` when its status, output hash, files and
model calls are. Every text and list is bounded and says when it was cut.

:func:`replay_run` re-executes every code step of a finished run from its own before-step
snapshot (:func:`onebox.snapshots.replay.replay`), in plan order, and reports per step
whether its output matches, and the first step that differs with its output and file
diff. No model is asked: code steps do not call one, and the run's other steps (model
calls, approvals) keep their recorded results. An inherited step (a fork's) replays the
attempt it was copied from. The replay is recorded as a new run (``request.replay``), so
``show``, ``explain`` and ``onebox diff RUN REPLAY`` read it like any run.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from onebox import textdiff
from onebox.errors import Conflict, NotFound
from onebox.objects.base import ObjectStore
from onebox.runtime.engine import submit
from onebox.runtime.engine.archive import finish_run, output_hash
from onebox.runtime.services import session_service, tenant_sessions, workspace_diff
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.capture import safe_text
from onebox.sandbox.snapshot_manifest import Manifest, diff
from onebox.sandbox.snapshots import load_manifest
from onebox.snapshots.replay import STDIO_TAIL_CHARS, ReplayReport, new_session_id, replay
from onebox.store import runs as store
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("run_compare")
FORKS = load_queries("forks")
CODE_TOOLS = frozenset({"python", "bash", "node"})
MAX_TEXT_DIFF_CHARS = 20_000


async def _run(db: Database, run_id: uuid.UUID, tenant_id: str, field: str) -> Row:
    async with db.connection() as conn:
        run = await store.fetch_one(conn, "get_run", {"run_id": run_id})
    if run is None or run.get("tenant_id") != tenant_id:
        raise NotFound(f"run {run_id} does not exist", field=field)
    return run


async def _attempts(db: Database, run_id: uuid.UUID) -> list[Row]:
    rows = await db.fetch(Q["latest_attempts"], {"run_id": run_id})
    return sorted(rows, key=lambda r: (r["step_number"], r["step_id"]))


def text_diff(a: str | None, b: str | None, name: str) -> dict[str, Any]:
    """A unified diff of two texts, bounded before it is computed (onebox.textdiff) and cut
    at ``MAX_TEXT_DIFF_CHARS`` (and said so)."""
    if (a or "") == (b or ""):
        return {"same": True, "diff": "", "cut": False}
    text, cut = textdiff.unified(a or "", b or "", f"a/{name}", f"b/{name}",
                                 max_chars=MAX_TEXT_DIFF_CHARS)
    return {"same": False, "diff": text, "cut": cut}


def _side(row: Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {"execution_id": str(row["id"]), "attempt": row["attempt"], "status": row["status"],
            "exit_code": row["exit_code"], "output_hash": row["output_hash"],
            "inherited_from": (row["details"] or {}).get("inherited_from")}


async def diff_runs(db: Database, objects: ObjectStore, run_a: uuid.UUID, run_b: uuid.UUID,
                    tenant_id: str) -> dict[str, Any]:
    """The two runs step by step (see the module)."""
    await _run(db, run_a, tenant_id, "run_a")
    await _run(db, run_b, tenant_id, "run_b")
    a_rows, b_rows = await _attempts(db, run_a), await _attempts(db, run_b)
    a_by, b_by = {r["step_id"]: r for r in a_rows}, {r["step_id"]: r for r in b_rows}
    order = [r["step_id"] for r in a_rows] + [r["step_id"] for r in b_rows
                                               if r["step_id"] not in a_by]
    calls_a = _calls_by_step(await db.fetch(Q["model_calls"], {"run_id": run_a}))
    calls_b = _calls_by_step(await db.fetch(Q["model_calls"], {"run_id": run_b}))
    steps = []
    for step_id in order:
        a, b = a_by.get(step_id), b_by.get(step_id)
        entry: dict[str, Any] = {"step_id": step_id, "a": _side(a), "b": _side(b)}
        if a is not None and b is not None:
            entry["stdout"] = text_diff(a["stdout"], b["stdout"], f"{step_id}/stdout")
            entry["stderr"] = text_diff(a["stderr"], b["stderr"], f"{step_id}/stderr")
            entry["files"] = await _files(db, objects, run_a, a, run_b, b)
            entry["same"] = (a["output_hash"] == b["output_hash"]
                             and a["status"] == b["status"]
                             and entry["files"].get("same", True))
        else:
            entry["same"] = False
        entry["model_calls"] = _calls_diff(calls_a.get(step_id, []), calls_b.get(step_id, []))
        if entry["model_calls"]["differ"]:
            entry["same"] = False
        steps.append(entry)
    changed = [s["step_id"] for s in steps if not s["same"]]
    return {"run_a": str(run_a), "run_b": str(run_b), "steps": steps, "differing": changed,
            "first_difference": changed[0] if changed else None}


async def _files(db: Database, objects: ObjectStore, run_a: uuid.UUID, a: Row,
                 run_b: uuid.UUID, b: Row) -> dict[str, Any]:
    """The files either step wrote (added, changed, removed from its before to its after
    snapshot) that ended differently in the two runs, with a text diff where small."""
    side_a, side_b = await _snapshots(db, a), await _snapshots(db, b)
    if side_a is None or side_b is None:
        return {"compared": False, "why": "a step has no after-step snapshot"}
    pre_a, post_a, pre_b, post_b = [
        Manifest(()) if side[key] is None else await load_manifest(objects, str(side[key]).strip())
        for side in (side_a, side_b) for key in ("pre_sha256", "post_sha256")]
    touched = _touched(pre_a, post_a) | _touched(pre_b, post_b)
    after_a, after_b = post_a.by_path(), post_b.by_path()
    differ = sorted(p for p in touched if after_a.get(p) != after_b.get(p))
    if not differ:
        return {"compared": True, "same": True, "paths": [], "files": [], "truncated": False}
    full = await workspace_diff.across(db, objects, side_a["run_id"], side_a["id"],
                                       side_b["run_id"], side_b["id"])
    data = full.to_json()
    wanted = set(differ)
    return {"compared": True, "same": False, "paths": differ[:workspace_diff.MAX_LISTED],
            "files": [f for f in data["files"] if f["path"] in wanted],
            "truncated": data["truncated"] or len(differ) > workspace_diff.MAX_LISTED}


async def _snapshots(db: Database, row: Row) -> Row | None:
    """The attempt's (or, inherited, its original's) run and snapshots; None without an
    after-step one (without a before-step one the step started with no workspace)."""
    source = (row["details"] or {}).get("inherited_from")
    found = await db.fetchone(Q["execution_snapshots"],
                              {"id": uuid.UUID(source) if source else row["id"]})
    if found is None or found["post_sha256"] is None:
        return None
    return found


def _touched(before: Manifest, after: Manifest) -> set[str]:
    changes = diff(before, after)
    return {*changes.added, *changes.removed, *changes.changed}


def _calls_by_step(rows: list[Row]) -> dict[str | None, list[Row]]:
    out: dict[str | None, list[Row]] = {}
    for row in rows:
        out.setdefault(row["step_id"], []).append(row)
    return out


def _call_json(row: Row) -> dict[str, Any]:
    answer = json.dumps(row["response"])[:2000] if row["response"] is not None else None
    return {"model": row["model"], "prompt_hash": row["prompt_hash"],
            "answer_hash": row["answer_hash"], "answer": answer,
            "tokens": row["prompt_tokens"] + row["completion_tokens"],
            "cost_usd": float(row["cost_usd"]) if row["cost_usd"] is not None else None,
            "error": row["error"]}


def _calls_diff(a: list[Row], b: list[Row]) -> dict[str, Any]:
    pairs = []
    for n in range(max(len(a), len(b))):
        left = _call_json(a[n]) if n < len(a) else None
        right = _call_json(b[n]) if n < len(b) else None
        same = left is not None and right is not None and \
            left["prompt_hash"] == right["prompt_hash"] and \
            left["answer_hash"] == right["answer_hash"]
        if not same:
            pairs.append({"call": n, "a": left, "b": right})
    return {"a": len(a), "b": len(b), "differ": bool(pairs), "calls": pairs[:20]}


async def replay_run(db: Database, backend: SandboxBackend, objects: ObjectStore,
                     run_id: uuid.UUID, tenant_id: str, *,
                     on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every code step of a finished run re-executed from its own inputs, recorded as a new
    run marked as a replay (see the module); ``on_step`` hears of each step as it is done."""
    run = await _run(db, run_id, tenant_id, "run_id")
    if run["status"] not in store.TERMINAL_RUN_STATES:
        raise Conflict(f"run {run_id} is {run['status']}: replay a run once it has ended",
                       field="run_id")
    async with _session_slot(db, backend, tenant_id):
        steps, first, done, attempts = await _replay_steps(db, backend, objects, run_id,
                                                           on_step)
    replayed = [s for s in steps if s["replayed"]]
    result = {"run_id": str(run_id), "steps": steps, "replayed": len(replayed),
              "matches": sum(1 for s in replayed if s["match"]), "model_calls": 0,
              "first_difference": first}
    result["replay_run_id"] = str(await _record_replay(db, run, attempts, done, result))
    return result


@contextlib.asynccontextmanager
async def _session_slot(db: Database, backend: SandboxBackend,
                        tenant_id: str) -> AsyncIterator[None]:
    """One of the tenant's live-session slots (``sandbox.max_sessions_per_tenant``) for as
    long as a replay runs its sandboxes (one at a time): a tenant at its share is refused
    (429), as when it opens a session. The slot is owned by this process: if it dies
    mid-replay, the next sweep on its sandbox dir releases it."""
    slot = new_session_id("replay")
    await tenant_sessions.insert_session(db, slot, backend.name, tenant_id,
                                         session_service.session_share(backend),
                                         owner=backend.local_owner())
    try:
        yield
    finally:
        await tenant_sessions.release_session(db, slot, tenant_id)


async def _replay_steps(db: Database, backend: SandboxBackend, objects: ObjectStore,
                        run_id: uuid.UUID, on_step: Callable[[dict[str, Any]], None] | None,
                        ) -> tuple[list[dict[str, Any]], dict[str, Any] | None,
                                   list[tuple[Row, uuid.UUID, ReplayReport]], list[Row]]:
    steps: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    done: list[tuple[Row, uuid.UUID, ReplayReport]] = []
    attempts = await _attempts(db, run_id)
    for row in attempts:
        source = (row["details"] or {}).get("inherited_from")
        execution = uuid.UUID(source) if source else row["id"]
        if row["tool_name"] not in CODE_TOOLS or row["status"] != "SUCCESS":
            entry = {"step_id": row["step_id"], "replayed": False, "execution_id":
                     str(execution), "why": "not a finished code step: its recorded "
                     "result stands"}
        else:
            report = await replay(db, backend, objects, execution, hash_output=output_hash)
            done.append((row, execution, report))
            entry = {"step_id": row["step_id"], "replayed": True,
                     "execution_id": str(execution), "match": report.match,
                     "pre_source": report.pre_source,
                     "output_hash": {"recorded": report.recorded_output_hash,
                                     "replayed": report.replayed_output_hash}}
            if not report.match and first is None:
                first = _difference(row["step_id"], execution, report)
        steps.append(entry)
        if on_step is not None:
            on_step(entry)
    return steps, first, done, attempts


def _difference(step_id: str, execution: uuid.UUID, report: ReplayReport) -> dict[str, Any]:
    """The first step that differs: its output diff (bounded) and its files."""
    return {"step_id": step_id, "execution_id": str(execution),
            "stdout_diff": report.stdout_diff[:MAX_TEXT_DIFF_CHARS],
            "stderr_diff": report.stderr_diff[:MAX_TEXT_DIFF_CHARS],
            "cut": max(len(report.stdout_diff), len(report.stderr_diff)) > MAX_TEXT_DIFF_CHARS,
            "files": report.files.to_json()}


async def _record_replay(db: Database, run: Row, attempts: list[Row],
                         done: list[tuple[Row, uuid.UUID, ReplayReport]],
                         result: dict[str, Any]) -> uuid.UUID:
    """The replay as a run of its own (``request.replay`` names the original): each
    re-executed step with what it printed (``details.replay_of``, ``match``), every other
    step's recorded result copied (``inherited_from``); SUCCEEDED when every replayed step
    matched, else FAILED naming the first that differs."""
    first = result["first_difference"]
    replayed = {row["id"]: (execution, report) for row, execution, report in done}
    async with db.transaction() as conn:
        made = await submit.insert_run(
            conn, run["source"], {"replay": {"run_id": str(run["id"])}},
            name=f"replay of {run.get('name') or run['id']}", idempotency_key=None,
            tenant_id=run["tenant_id"], profile=run.get("profile"))
        plan_ids = await submit.copy_plan_versions(conn, run["id"], made)
        session_id = submit.session_id_for(made.run_id)
        base = {"run_id": made.run_id, "session_id": session_id, "trace_id": made.trace_id}
        for row in attempts:
            ids = {**base, "id": uuid.uuid4(), "plan_id": plan_ids.get(row["plan_id"])}
            if row["id"] in replayed:
                execution, report = replayed[row["id"]]
                await conn.execute(Q["replay_attempt"], {**ids, **_replayed(report),
                                                         "original": execution})
            else:
                await conn.execute(FORKS["inherit_attempt"], {
                    **ids, "step_number": row["step_number"], "parent_id": row["id"],
                    "parent_run": run["id"]})
        summary = {"replayed": result["replayed"], "matches": result["matches"],
                   "first_difference": first["step_id"] if first else None}
        await store.append_event(conn, made.run_id, "run_replay", {
            "of_run_id": str(run["id"]), **summary}, trace_id=made.trace_id)
        await store.append_event(conn, run["id"], "run_replayed", {
            "replay_run_id": str(made.run_id), **summary}, trace_id=run["trace_id"])
        made_row = await store.fetch_one(conn, "get_run", {"run_id": made.run_id})
        assert made_row is not None
        error = None if first is None else (
            f"step {first['step_id']} differs from run {run['id']} "
            f"({result['matches']} of {result['replayed']} replayed steps match)")
        await finish_run(conn, made_row, "SUCCEEDED" if first is None else "FAILED", error)
    return made.run_id


def _replayed(report: ReplayReport) -> dict[str, Any]:
    """A replayed step's row fields, from what the replay printed."""
    out = report.result
    status = "TIMEOUT" if out.timed_out else "SUCCESS" if out.ok else "FAILED"
    return {"status": status, "exit_code": out.exit_code, "match": report.match,
            "output_hash": report.replayed_output_hash if status == "SUCCESS" else None,
            "duration_ms": out.duration_ms, "memory_used_mb": out.memory_peak_mb,
            "stdout": safe_text(out.stdout[-STDIO_TAIL_CHARS:]),
            "stderr": safe_text(out.stderr[-STDIO_TAIL_CHARS:]), "error": out.error}
