"""Two runs side by side: the determinism check of a run.

    diff = await diff_runs(db, store, run_a, run_b, tenant_id)      # onebox diff A B

:func:`diff_runs` aligns the steps by id (in the first run's plan order, then the second's
own), and for each says status, exit code and output hash on both sides, a unified diff of
stdout and stderr, the files whose content differs between the two steps' after-step
snapshots (:func:`workspace_diff.across`), and the model calls that differ (what was asked,
what was answered, tokens, cost). A step is ``same`` when its status, output hash, files and
model calls are. Every text and list is bounded (before it is computed: onebox.textdiff)
and says when it was cut. A whole run replayed is :mod:`onebox.runtime.services.replays`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from onebox import textdiff
from onebox.errors import NotFound
from onebox.objects.base import ObjectStore
from onebox.runtime.services import workspace_diff
from onebox.sandbox.snapshot_manifest import Manifest, diff
from onebox.sandbox.snapshots import load_manifest
from onebox.store import runs as store
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("run_compare")
CODE_TOOLS = frozenset({"python", "bash", "node"})
MAX_TEXT_DIFF_CHARS = 20_000


async def tenant_run(db: Database, run_id: uuid.UUID, tenant_id: str, field: str) -> Row:
    """The tenant's run; NotFound naming ``field`` for another tenant's or none."""
    async with db.connection() as conn:
        run = await store.fetch_one(conn, "get_run", {"run_id": run_id})
    if run is None or run.get("tenant_id") != tenant_id:
        raise NotFound(f"run {run_id} does not exist", field=field)
    return run


async def latest_attempts(db: Database, run_id: uuid.UUID) -> list[Row]:
    """Every step's newest attempt, in plan order."""
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
    await tenant_run(db, run_a, tenant_id, "run_a")
    await tenant_run(db, run_b, tenant_id, "run_b")
    a_rows, b_rows = await latest_attempts(db, run_a), await latest_attempts(db, run_b)
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


