"""A run's files as one history: change sets, views and the head (docs/runtime.md).

Every archived step attempt has a *change set*: what it did to the workspace, from the view
it started on to what it left (``{path: entry, or None for a removal}``), recorded in the
transaction that archives it (:func:`commit`), so an attempt whose lease was taken over
records nothing. From those alone:

- a step's **view** is the run's *base* (its inputs, or the snapshot a fork or a thread
  starts from) plus the change sets of the steps it depends on, directly or not, applied in
  plan order (:func:`fold`). Steps that do not depend on each other never see each other's
  writes, whichever host runs them and whenever;
- the run's **head** is the base plus every step's change set, in plan order. It is stored as
  a committed 'merge' snapshot when it changes; a step that changes nothing leaves it alone.

Two steps that change one path without one depending on the other: the one later in the
plan wins (an *overwrite*, named in the ``workspace_merged`` event, ``show`` and ``explain``);
a plan with ``conflicts: fail`` fails the step whose view holds such a pair instead. Every
archived attempt of a step counts, in attempt order: a retry goes on from what the failed
attempt left. Everything here depends on the plan and the change sets, never on timing or
placement.
"""

from __future__ import annotations

import asyncio
import posixpath
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onebox.errors import NotFound, StorageError
from onebox.objects.base import ObjectStore, manifest_key
from onebox.sandbox.snapshot_manifest import Entry, Manifest, entry_from_json
from onebox.sandbox.snapshots import load_manifest
from onebox.store import runs as run_rows
from onebox.store import snapshots as rows
from onebox.store.db import Conn, Row

Changes = dict[str, Entry | None]
DIR_MODE = 0o755  # a directory a kept entry needs that no step's view described
MANIFEST_CACHE = 64
EVENT_OVERWRITES = 50


@dataclass(frozen=True)
class StepChanges:
    """One archived attempt's change set, at its step's place in the plan."""

    step_id: str
    position: int
    changes: Mapping[str, Entry | None]
    attempt: int = 1


@dataclass(frozen=True)
class Overwrite:
    """``path`` was changed by two steps, neither depending on the other: ``kept``'s
    version is in the result, ``lost``'s is not."""

    path: str
    kept: str
    lost: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "kept": self.kept, "lost": self.lost}


@dataclass(frozen=True)
class Folded:
    manifest: Manifest
    overwrites: tuple[Overwrite, ...]


# -- pure --------------------------------------------------------------------


def change_set(before: Manifest, after: Manifest) -> Changes:
    """What turned ``before`` into ``after``: each changed or added path's new entry, and
    None for each removed one."""
    old, new = before.by_path(), after.by_path()
    out: Changes = {p: None for p in old.keys() - new.keys()}
    out.update((p, e) for p, e in new.items() if old.get(p) != e)
    return out


def changes_to_json(changes: Mapping[str, Entry | None]) -> dict[str, Any]:
    return {p: (None if e is None else e.to_json()) for p, e in sorted(changes.items())}


def changes_from_json(raw: Mapping[str, Any]) -> Changes:
    return {str(p): (None if e is None else entry_from_json(e)) for p, e in raw.items()}


def compose(change_sets: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One change set doing what these do one after the other (stored form or parsed)."""
    out: dict[str, Any] = {}
    for changes in change_sets:
        out.update(changes)
    return out


def in_plan_order(steps: Sequence[StepChanges]) -> list[StepChanges]:
    return sorted(steps, key=lambda s: (s.position, s.step_id, s.attempt))


def fold(base: Manifest, steps: Sequence[StepChanges],
         ancestors: Mapping[str, frozenset[str]] | None = None) -> Folded:
    """``base`` with each step's change set applied in plan order. A path that a step changes
    after another step that is not among its ``ancestors`` changed it is an overwrite (with
    ``ancestors`` None every step counts as depending on the earlier ones). The result is a
    valid tree: a directory a kept entry needs is kept (or made), and an entry under a path
    that is no longer a directory is dropped (both overwrites of the step that caused it)."""
    entries = base.by_path()
    writer: dict[str, str] = {}
    overwrites: dict[str, Overwrite] = {}
    known_dirs = {p: e for p, e in entries.items() if e.type == "dir"}
    for step in in_plan_order(steps):
        before = ancestors.get(step.step_id, frozenset()) if ancestors is not None else None
        for path, entry in sorted(step.changes.items()):
            earlier = writer.get(path)
            if (earlier is not None and before is not None and earlier not in before
                    and earlier != step.step_id and entries.get(path) != entry):
                overwrites[path] = Overwrite(path, step.step_id, earlier)
            writer[path] = step.step_id
            if entry is None:
                entries.pop(path, None)
            else:
                entries[path] = entry
                if entry.type == "dir":
                    known_dirs[path] = entry
    manifest, dropped = _whole_tree(entries, known_dirs, writer)
    for path, (kept, lost) in dropped.items():
        overwrites.setdefault(path, Overwrite(path, kept, lost))
    return Folded(manifest, tuple(overwrites[p] for p in sorted(overwrites)))


def _whole_tree(entries: dict[str, Entry], known_dirs: Mapping[str, Entry],
                writer: Mapping[str, str]) -> tuple[Manifest, dict[str, tuple[str, str]]]:
    """The entries as a valid tree, and what had to change for it: path -> (the step whose
    change decided, the step whose change gave way). A parent sorts before its children, so
    each parent in ``entries`` is decided before them."""
    kept: dict[str, Entry] = {}
    dropped: dict[str, tuple[str, str]] = {}

    def is_dir(path: str, child: str) -> bool:
        if path in kept:
            return kept[path].type == "dir"
        if path in dropped or path in entries:
            return False
        grand = posixpath.dirname(path)
        if grand and not is_dir(grand, child):
            return False
        kept[path] = known_dirs.get(path) or Entry(path, "dir", DIR_MODE)  # removed, still needed
        dropped[path] = (writer.get(child, "?"), writer.get(path, "?"))
        return True

    for path in sorted(entries):
        parent = posixpath.dirname(path)
        if parent and not is_dir(parent, path):
            dropped[path] = (writer.get(parent, "?"), writer.get(path, "?"))
            continue
        kept[path] = entries[path]
    return Manifest(tuple(kept[p] for p in sorted(kept))), dropped


# -- stored ------------------------------------------------------------------


class Manifests:
    """Manifests read from the object store, by hash, a bounded number kept in memory."""

    def __init__(self, store: ObjectStore, keep: int = MANIFEST_CACHE) -> None:
        self.store, self.keep = store, keep
        self._cache: OrderedDict[str, Manifest] = OrderedDict()

    async def get(self, sha256: str) -> Manifest:
        sha256 = sha256.strip()
        found = self._cache.get(sha256)
        if found is None:
            try:
                found = await load_manifest(self.store, sha256)
            except (NotFound, FileNotFoundError) as exc:
                raise StorageError(f"snapshot manifest {manifest_key(sha256)} is missing from "
                                   "the object store (deleted by hand, or a store other hosts "
                                   "do not share); `onebox doctor` checks every object the "
                                   "database expects") from exc
            self.remember(found)
        self._cache.move_to_end(sha256)
        return found

    def remember(self, manifest: Manifest) -> None:
        self._cache[manifest.sha256] = manifest
        while len(self._cache) > self.keep:
            self._cache.popitem(last=False)

    async def put(self, manifest: Manifest) -> None:
        key = manifest_key(manifest.sha256)
        if await self.store.missing([key]):
            await self.store.put(key, manifest.to_bytes())
        self.remember(manifest)


async def base_of(conn: Conn, manifests: Manifests, session_id: str,
                  run_id: uuid.UUID) -> Manifest:
    row = await rows.run_base(conn, session_id, run_id)
    return Manifest(()) if row is None else await manifests.get(str(row["sha256"]))


_PARSED: OrderedDict[uuid.UUID, Changes] = OrderedDict()  # an attempt's set never changes
PARSED_KEPT = 4096


async def steps_of(conn: Conn, run_id: uuid.UUID) -> list[StepChanges]:
    """The change set of each archived attempt of the run; each set is read from the
    database and parsed once per process (a big one in a thread)."""
    found = await rows.run_changes(conn, run_id)
    wanted = [r["execution_id"] for r in found if r["execution_id"] not in _PARSED]
    if wanted:
        raw = await rows.changes_of(conn, wanted)
        big = sum(int(r["paths"]) for r in found if r["execution_id"] in raw) > 2000
        parsed = await asyncio.to_thread(_parse_all, raw) if big else _parse_all(raw)
        _PARSED.update(parsed)
    out = []
    for r in found:
        changes = _PARSED.get(r["execution_id"])
        if changes is None:  # its row went meanwhile (the run was deleted)
            continue
        _PARSED.move_to_end(r["execution_id"])
        out.append(StepChanges(str(r["step_id"]), int(r["position"]), changes,
                               int(r["attempt"])))
    while len(_PARSED) > PARSED_KEPT:
        _PARSED.popitem(last=False)
    return out


def _parse_all(raw: Mapping[uuid.UUID, Any]) -> dict[uuid.UUID, Changes]:
    return {k: changes_from_json(v) for k, v in raw.items()}


@dataclass(frozen=True)
class PlanShape:
    """What the history needs of a run's plan: each step's direct dependencies (None: the
    plan does not say, as for the agent's steps), and whether overwrites fail a step."""

    graph: Mapping[str, Sequence[str]] | None
    fail_on_conflict: bool = False

    def ancestors(self, step_id: str) -> frozenset[str] | None:
        if self.graph is None or step_id not in self.graph:
            return None
        return ancestors_in(self.graph, step_id)

    def ancestry(self, steps: Sequence[StepChanges]) -> dict[str, frozenset[str]] | None:
        """Each step's ancestors (None when one of them is not in the plan)."""
        if self.graph is None or any(s.step_id not in self.graph for s in steps):
            return None
        return {s.step_id: ancestors_in(self.graph, s.step_id) for s in steps}


_SHAPES: OrderedDict[str, PlanShape] = OrderedDict()  # plan versions never change
SHAPES_KEPT = 256


async def plan_shape(conn: Conn, plan_id: Any) -> PlanShape:
    key = str(plan_id)
    found = _SHAPES.get(key)
    if found is None:
        row = await run_rows.fetch_one(conn, "plan_by_id", {"plan_id": plan_id})
        spec = row["spec"] if row is not None else None
        found = PlanShape(plan_graph(spec),
                          isinstance(spec, dict) and spec.get("conflicts") == "fail")
        _SHAPES[key] = found
        while len(_SHAPES) > SHAPES_KEPT:
            _SHAPES.popitem(last=False)
    _SHAPES.move_to_end(key)
    return found


async def view(conn: Conn, manifests: Manifests, row: Row, plan: PlanShape) -> Folded:
    """What the attempt ``row`` starts on: the base plus its ancestors' change sets (every
    other step so far when the plan does not say, as for the agent's steps), and those of
    its own step's earlier attempts (a retry goes on from what they left)."""
    base = await base_of(conn, manifests, row["session_id"], row["run_id"])
    attempt = int(row.get("attempt") or 1)
    ancestors = plan.ancestors(row["step_id"])
    steps = [s for s in await steps_of(conn, row["run_id"])
             if (s.step_id == row["step_id"] and s.attempt < attempt)
             or (s.step_id != row["step_id"] and (ancestors is None or s.step_id in ancestors))]
    return await asyncio.to_thread(fold, base, steps, plan.ancestry(steps))


def plan_graph(spec: Any) -> dict[str, list[str]] | None:
    steps = spec.get("steps") if isinstance(spec, dict) else None
    if not isinstance(steps, list):
        return None
    return {str(s.get("id")): [str(d) for d in s.get("depends_on") or []]
            for s in steps if isinstance(s, dict)}


def ancestors_in(graph: Mapping[str, Sequence[str]], step_id: str) -> frozenset[str]:
    """Every step ``step_id`` depends on, directly or through others."""
    found: set[str] = set()
    todo = list(graph.get(step_id, ()))
    while todo:
        step = todo.pop()
        if step not in found:
            found.add(step)
            todo.extend(graph.get(step, ()))
    return frozenset(found)


@dataclass(frozen=True)
class Committed:
    head_id: uuid.UUID | None  # the new head, None when it did not change
    overwrites: tuple[Overwrite, ...]  # those this step is part of


async def commit(conn: Conn, manifests: Manifests, row: Row, position: int,
                 changes: Changes, post: tuple[uuid.UUID, str] | None = None) -> Committed:
    """Record the archived attempt's change set and bring the head up to date, inside the
    archive's transaction (after its fenced write). The head is stored only when it
    changed (as the attempt's ``post`` snapshot, id and hash, when that holds it all); the
    overwrites this step takes part in are named in a ``workspace_merged`` event."""
    await rows.record_changes(conn, row, position, changes_to_json(changes))
    _PARSED[row["id"]] = dict(changes)
    await rows.lock_session_commits(conn, row["session_id"])
    base = await base_of(conn, manifests, row["session_id"], row["run_id"])
    steps = await steps_of(conn, row["run_id"])
    plan = await plan_shape(conn, row.get("plan_id"))
    folded = await asyncio.to_thread(fold, base, steps, plan.ancestry(steps))
    mine = tuple(o for o in folded.overwrites if row["step_id"] in (o.kept, o.lost))
    head = await rows.latest_commit(conn, row["session_id"])
    head_id = None
    if head is None or str(head["sha256"]).strip() != folded.manifest.sha256:
        if post is not None and post[1] == folded.manifest.sha256:
            head_id = post[0]  # the step's own 'post' holds the whole head: it becomes it
            await rows.commit(conn, head_id)
        else:
            head_id = await _store_head(conn, manifests, row, folded.manifest)
    if mine:
        await run_rows.append_event(conn, row["run_id"], "workspace_merged", {
            "step_id": row["step_id"], "rule": "plan order: the later step's version is kept",
            "overwrites": [o.to_json() for o in mine[:EVENT_OVERWRITES]],
            "count": len(mine)}, trace_id=row["trace_id"], session_id=row["session_id"],
            execution_id=row["id"])
    return Committed(head_id, mine)


async def _store_head(conn: Conn, manifests: Manifests, row: Row,
                      manifest: Manifest) -> uuid.UUID:
    head_id = uuid.uuid4()
    await rows.register(
        conn, snapshot_id=head_id, session_id=row["session_id"], execution_id=row["id"],
        kind="merge", sha256=manifest.sha256, manifest_key=manifest_key(manifest.sha256),
        total_bytes=manifest.total_bytes, file_count=len(manifest.files()),
        object_keys=manifest.object_keys())
    await manifests.put(manifest)
    await rows.commit(conn, head_id)
    return head_id


async def record_view(conn: Conn, manifests: Manifests, manifest: Manifest, *,
                      session_id: str, execution_id: uuid.UUID) -> uuid.UUID:
    """The attempt's 'pre' snapshot: its view, made from stored objects alone (every blob
    of a view is stored already: it comes from the base or a step's 'post')."""
    event = {"sha256": manifest.sha256, "reused": True, "stored_bytes": 0, "view": True}
    found = await rows.reuse(conn, session_id=session_id, sha256=manifest.sha256,
                             execution_id=execution_id, pre=True, event=event)
    if found is not None:
        return found
    snapshot_id = uuid.uuid4()
    await rows.register(
        conn, snapshot_id=snapshot_id, session_id=session_id, execution_id=execution_id,
        kind="pre", sha256=manifest.sha256, manifest_key=manifest_key(manifest.sha256),
        total_bytes=manifest.total_bytes, file_count=len(manifest.files()),
        object_keys=manifest.object_keys())
    await manifests.put(manifest)
    await rows.finish(conn, snapshot_id, stored_bytes=0, duration_ms=0.0,
                      execution_id=execution_id, pre=True, event={**event, "reused": False})
    return snapshot_id
