"""The workspace of a run between two step attempts, from their snapshots.

    diff = await workspace_diff.between(db, store, run_id, to_execution=e2, from_execution=e1)
    diff.to_json()   # {"from": ..., "to": ..., "summary": ..., "files": [...], "truncated": ...}

Each side is an execution's after-step snapshot. Without ``from_execution`` the "before"
side is the workspace just before the ``to`` step: its pre-execution snapshot, else the
newest after-step snapshot of the run taken before it, else an empty workspace. Without
``to_execution`` it is the run's newest step attempt with a snapshot.

Both manifests and every blob read are verified against their sha256 by the object store.
Files added, removed or changed are listed (path, type, sizes, sha256s), at most
``MAX_LISTED``; a unified diff (onebox.textdiff, bounded before it is computed) is made
for at most ``MAX_TEXT_FILES`` text files
of at most ``MAX_TEXT_BYTES`` each and ``MAX_TEXT_LINES`` lines, and at most
``MAX_DIFF_CHARS`` of diff text in all; anything past a bound says so in ``note``.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from onebox import textdiff
from onebox.errors import NotFound
from onebox.objects.base import ObjectStore, blob_key, manifest_key
from onebox.sandbox.snapshot_manifest import Entry, Manifest, diff
from onebox.store.db import Database
from onebox.store.queries import load_queries

Q = load_queries("workspace_diff")
MAX_LISTED = 1000
MAX_TEXT_FILES = 20
MAX_TEXT_BYTES = 256 * 1024
MAX_TEXT_LINES = 10_000
MAX_DIFF_CHARS = 1 << 20
Source = Literal["execution", "pre_snapshot", "previous_step", "empty"]
Change = Literal["added", "removed", "changed"]


@dataclass(frozen=True)
class Side:
    """One side of a diff: whose snapshot it is, and how it was chosen."""

    source: Source
    execution_id: uuid.UUID | None = None
    step_id: str | None = None
    attempt: int | None = None
    snapshot_id: uuid.UUID | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class FileDelta:
    path: str
    change: Change
    type_before: str | None
    type_after: str | None
    size_before: int | None
    size_after: int | None
    sha256_before: str | None
    sha256_after: str | None
    binary: bool | None = None
    diff: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class WorkspaceDiff:
    run_id: uuid.UUID
    before: Side
    after: Side
    files: tuple[FileDelta, ...]
    counts: dict[str, int]
    truncated: bool

    def to_json(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "from": _side_json(self.before),
                "to": _side_json(self.after), "summary": self.counts,
                "files": [asdict(f) for f in self.files], "truncated": self.truncated,
                "limits": {"max_listed": MAX_LISTED, "max_text_files": MAX_TEXT_FILES,
                           "max_text_bytes": MAX_TEXT_BYTES, "max_diff_chars": MAX_DIFF_CHARS}}


def _side_json(side: Side) -> dict[str, Any]:
    data = asdict(side)
    return {k: str(v) if isinstance(v, uuid.UUID) else v for k, v in data.items()}


async def between(
    db: Database, store: ObjectStore, run_id: uuid.UUID, *,
    to_execution: uuid.UUID | None = None, from_execution: uuid.UUID | None = None,
) -> WorkspaceDiff:
    """The diff of the run's workspace from one step attempt's snapshot to another's."""
    to_row = await _to_row(db, run_id, to_execution)
    after = _after_side(to_row, "to")
    if from_execution is not None:
        before = _after_side(await _execution(db, run_id, from_execution, "from"), "from")
    else:
        before = await _default_before(db, run_id, to_row)
    old, new = await asyncio.gather(_manifest(store, before), _manifest(store, after))
    return await _compare(store, run_id, before, after, old, new)


async def across(
    db: Database, store: ObjectStore, run_a: uuid.UUID, execution_a: uuid.UUID,
    run_b: uuid.UUID, execution_b: uuid.UUID,
) -> WorkspaceDiff:
    """The diff from one run's step attempt's after-step snapshot to another run's (the
    same step in two runs: a fork and its parent, a run and its replay)."""
    before = _after_side(await _execution(db, run_a, execution_a, "a"), "a")
    after = _after_side(await _execution(db, run_b, execution_b, "b"), "b")
    old, new = await asyncio.gather(_manifest(store, before), _manifest(store, after))
    return await _compare(store, run_b, before, after, old, new)


async def _execution(db: Database, run_id: uuid.UUID, execution_id: uuid.UUID,
                     field: str) -> dict[str, Any]:
    row = await db.fetchone(Q["execution"], {"run_id": run_id, "id": execution_id})
    if row is None:
        raise NotFound(f"step execution {execution_id} is not part of run {run_id}; take "
                       f"an execution_id from GET /v1/runs/{run_id}/steps", field=field)
    return row


async def _to_row(db: Database, run_id: uuid.UUID,
                  execution_id: uuid.UUID | None) -> dict[str, Any]:
    if execution_id is not None:
        return await _execution(db, run_id, execution_id, "to")
    latest = await db.fetchone(Q["latest"], {"run_id": run_id})
    if latest is None:
        raise NotFound(f"run {run_id} has no step with a workspace snapshot yet (snapshots "
                       "are taken after each step unless runtime.snapshot_policy says "
                       "otherwise)", field="to")
    return await _execution(db, run_id, latest["id"], "to")


def _after_side(row: dict[str, Any], field: str) -> Side:
    """The workspace after this step attempt: its READY after-step snapshot."""
    if row["snapshot_id"] is None or row["snapshot_status"] != "READY":
        state = "is still being written" if row["snapshot_id"] else "was not taken"
        raise NotFound(f"step execution {row['id']} ({row['step_id']} attempt "
                       f"{row['attempt']}) has no workspace snapshot: it {state}; pick a "
                       "step attempt whose snapshot_id is set", field=field)
    return Side("execution", row["id"], row["step_id"], row["attempt"], row["snapshot_id"],
                str(row["sha256"]).strip())


async def _default_before(db: Database, run_id: uuid.UUID, to_row: dict[str, Any]) -> Side:
    """Just before the step: its pre-execution snapshot, else the previous step's, else empty."""
    if to_row["pre_snapshot_id"] is not None and to_row["pre_status"] == "READY":
        return Side("pre_snapshot", to_row["id"], to_row["step_id"], to_row["attempt"],
                    to_row["pre_snapshot_id"], str(to_row["pre_sha256"]).strip())
    found = await db.fetchone(Q["previous"], {"run_id": run_id, "id": to_row["id"],
                                              "before": to_row["started_at"]})
    if found is None:
        return Side("empty")
    side = _after_side(await _execution(db, run_id, found["id"], "from"), "from")
    return replace(side, source="previous_step")


async def _manifest(store: ObjectStore, side: Side) -> Manifest:
    if side.sha256 is None:
        return Manifest(())
    key = manifest_key(side.sha256)
    data = await store.get_verified(key, side.sha256)
    return await asyncio.to_thread(Manifest.from_bytes, data, source=key)


async def _compare(store: ObjectStore, run_id: uuid.UUID, before: Side, after: Side,
                   old: Manifest, new: Manifest) -> WorkspaceDiff:
    changes = await asyncio.to_thread(diff, old, new)
    old_by, new_by = old.by_path(), new.by_path()
    listed: list[tuple[str, Change]] = [(p, "added") for p in changes.added]
    listed += [(p, "removed") for p in changes.removed]
    listed += [(p, "changed") for p in changes.changed]
    listed.sort()
    budget = _Budget()
    files = [await _delta(store, path, change, old_by.get(path), new_by.get(path), budget)
             for path, change in listed[:MAX_LISTED]]
    counts = {"added": len(changes.added), "removed": len(changes.removed),
              "changed": len(changes.changed)}
    return WorkspaceDiff(run_id, before, after, tuple(files), counts,
                         truncated=len(listed) > MAX_LISTED or budget.exhausted)


class _Budget:
    """What is left of the text-diff bounds over one whole diff."""

    def __init__(self) -> None:
        self.files, self.chars, self.exhausted = MAX_TEXT_FILES, MAX_DIFF_CHARS, False

    def take(self, text: str) -> bool:
        if self.files <= 0 or len(text) > self.chars:
            self.exhausted = True
            return False
        self.files, self.chars = self.files - 1, self.chars - len(text)
        return True


async def _delta(store: ObjectStore, path: str, change: Change, old: Entry | None,
                 new: Entry | None, budget: _Budget) -> FileDelta:
    base = _base_delta(path, change, old, new)
    files = [e for e in (old, new) if e is not None and e.type == "file"]
    if not files or old is not None and new is not None and old.sha256 == new.sha256:
        return base  # a directory, a symlink, or only the mode changed
    refused = _no_text_diff(files, budget)
    if refused is not None:
        return _with(base, note=refused)
    texts = [await _text(store, e) if e is not None and e.type == "file" else ""
             for e in (old, new)]
    if None in texts:
        return _with(base, binary=True)
    return await _text_delta(base, texts[0] or "", texts[1] or "", budget)


def _base_delta(path: str, change: Change, old: Entry | None, new: Entry | None) -> FileDelta:
    """The delta's facts (types, sizes, hashes of both sides), without any text diff."""
    return FileDelta(path, change, old.type if old else None, new.type if new else None,
                     _size(old), _size(new), old.sha256 if old else None,
                     new.sha256 if new else None)


def _no_text_diff(files: list[Entry], budget: _Budget) -> str | None:
    """Why the files get no text diff (too large, the bound on diffs is spent), if so."""
    if any(e.size > MAX_TEXT_BYTES for e in files):
        return f"larger than {MAX_TEXT_BYTES} bytes: no diff shown"
    if budget.files <= 0:
        budget.exhausted = True
        return f"past {MAX_TEXT_FILES} text diffs: no diff shown"
    return None


async def _text_delta(base: FileDelta, old: str, new: str, budget: _Budget) -> FileDelta:
    if max(old.count("\n"), new.count("\n")) > MAX_TEXT_LINES:
        return _with(base, binary=False, note=f"more than {MAX_TEXT_LINES} lines: no diff shown")
    text = await asyncio.to_thread(_unified, base.path, old, new)
    if not budget.take(text):
        return _with(base, binary=False, note="the diff's text bound is spent: no diff shown")
    return _with(base, binary=False, diff=text)


def _size(entry: Entry | None) -> int | None:
    return entry.size if entry is not None and entry.type == "file" else None


def _with(delta: FileDelta, **changes: Any) -> FileDelta:
    return replace(delta, **changes)


async def _text(store: ObjectStore, entry: Entry) -> str | None:
    """The file's content as text (its blob, verified), or None when it is binary (a sparse
    file, whose blob holds only its data runs, counts as binary)."""
    assert entry.sha256 is not None
    if entry.extents is not None:
        return None
    data = await store.get_verified(blob_key(entry.sha256), entry.sha256)
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _unified(path: str, old: str, new: str) -> str:
    return textdiff.unified(old, new, f"a/{path}", f"b/{path}", max_chars=MAX_DIFF_CHARS)[0]
