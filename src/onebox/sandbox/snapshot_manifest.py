"""The snapshot manifest: a canonical, hashable description of a directory tree.

Canonical form: JSON with sorted keys, no whitespace, ASCII only, entries sorted
by path. Only what a program can observe about its inputs is kept: relative
path, type (file, dir, symlink), permission bits (``0o777``; setuid, setgid and
sticky are dropped), size and sha256 of files, targets of symlinks. Mtimes,
owners and inode numbers are not, so the same tree gives the same hash anywhere.

A sparse file keeps its holes: its entry lists the data ``extents`` (offset, length) and
the ``data_sha256`` of those bytes put end to end, which is the blob stored for it; its
``sha256`` stays the hash of its whole content (holes read as zeros), so diffs and
replays compare it like any file. An entry without extents is dense (every manifest
written before holes were kept is read as before).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from onebox.errors import IntegrityError, ValidationError
from onebox.objects.base import blob_key, check_sha256, manifest_key

FORMAT = "onebox-snapshot/1"
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
EntryType = Literal["file", "dir", "symlink"]


@dataclass(frozen=True)
class Entry:
    path: str
    type: EntryType
    mode: int
    size: int = 0
    sha256: str | None = None
    target: str | None = None
    extents: tuple[tuple[int, int], ...] | None = None  # a sparse file's data, see the module
    data_sha256: str | None = None

    @property
    def blob_sha256(self) -> str | None:
        """The hash the file's blob is stored under: its data's when sparse."""
        return self.data_sha256 if self.extents is not None else self.sha256

    @property
    def stored_size(self) -> int:
        """The bytes its blob holds: the data extents of a sparse file, else its size."""
        return sum(n for _, n in self.extents) if self.extents is not None else self.size

    @cached_property
    def canonical(self) -> bytes:
        """This entry as the manifest's canonical JSON holds it (computed once per entry: a
        manifest folded from another shares most of its entries, and so their bytes)."""
        return _CANONICAL.encode(self.to_json()).encode()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "type": self.type, "mode": self.mode}
        if self.type == "file":
            data.update(size=self.size, sha256=self.sha256)
            if self.extents is not None:
                data.update(extents=[list(x) for x in self.extents],
                            data_sha256=self.data_sha256)
        elif self.type == "symlink":
            data["target"] = self.target
        return data


@dataclass(frozen=True)
class Manifest:
    entries: tuple[Entry, ...]

    def to_bytes(self) -> bytes:
        return self._canonical

    @cached_property
    def _canonical(self) -> bytes:
        # json.dumps({"format": FORMAT, "entries": [...]}, sort_keys=True, ...) byte for byte,
        # from each entry's own canonical bytes ("entries" sorts before "format")
        return b"".join((b'{"entries":[', b",".join(e.canonical for e in self.entries),
                         b'],"format":', _CANONICAL.encode(FORMAT).encode(), b"}"))

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def files(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.type == "file")

    def dirs(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.type == "dir")

    def symlinks(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.type == "symlink")

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files())

    def object_keys(self) -> tuple[str, ...]:
        """Every object this snapshot needs: its blobs and its manifest, sorted."""
        return self._object_keys

    @cached_property
    def _object_keys(self) -> tuple[str, ...]:
        blobs = {blob_key(e.blob_sha256) for e in self.files() if e.blob_sha256}
        return tuple(sorted(blobs | {manifest_key(self.sha256)}))

    def by_path(self) -> dict[str, Entry]:
        return {e.path: e for e in self.entries}

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "manifest") -> Manifest:
        """Parse and validate a stored manifest; anything unexpected is an IntegrityError."""
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            entries = tuple(entry_from_json(raw) for raw in doc["entries"])
        except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
            raise IntegrityError(f"object {source} is not a valid snapshot manifest: {exc}") from exc
        manifest = cls(entries)
        problem = validate(manifest)
        if problem:
            raise IntegrityError(f"object {source} is not a valid snapshot manifest: {problem}")
        return manifest


def entry_from_json(raw: dict[str, Any]) -> Entry:
    """One entry as :meth:`Entry.to_json` wrote it (ValueError, KeyError or TypeError if not)."""
    kind = raw["type"]
    if kind == "file":
        size = int(raw["size"])
        extents = None if raw.get("extents") is None else _extents(raw["extents"], size)
        data_sha256 = None if extents is None else check_sha256(str(raw["data_sha256"]))
        return Entry(str(raw["path"]), "file", int(raw["mode"]), size,
                     check_sha256(str(raw["sha256"])), extents=extents, data_sha256=data_sha256)
    if kind == "dir":
        return Entry(str(raw["path"]), "dir", int(raw["mode"]))
    if kind == "symlink":
        return Entry(str(raw["path"]), "symlink", 0, target=str(raw["target"]))
    raise ValueError(f"unknown entry type {kind!r}")


MAX_EXTENTS = 4096  # data runs a sparse file's entry may list (more: it is stored dense)


def _extents(raw: Any, size: int) -> tuple[tuple[int, int], ...]:
    """Data runs in order, not overlapping, within the file, at most MAX_EXTENTS."""
    if not isinstance(raw, list) or len(raw) > MAX_EXTENTS:
        raise ValueError("extents must be a list of at most "
                         f"{MAX_EXTENTS} [offset, length] pairs")
    runs, end = [], 0
    for pair in raw:
        offset, length = (int(x) for x in pair)
        if offset < end or length <= 0 or offset + length > size:
            raise ValueError(f"extent {pair!r} overlaps, is empty or lies past the file's end")
        runs.append((offset, length))
        end = offset + length
    return tuple(runs)


def validate(manifest: Manifest) -> str | None:
    """Why the manifest is unsafe or inconsistent, or None: paths must be clean and relative,
    unique, sorted, and every parent must be a directory entry of the same manifest."""
    kinds: dict[str, EntryType] = {}
    previous = ""
    for entry in manifest.entries:
        problem = _path_problem(entry.path)
        if problem:
            return f"entry {entry.path!r}: {problem}"
        if entry.path in kinds or entry.path < previous:
            return f"entry {entry.path!r}: duplicate or out of order"
        parent = posixpath.dirname(entry.path)
        if parent and kinds.get(parent) != "dir":
            return f"entry {entry.path!r}: parent {parent!r} is not a directory entry"
        if not 0 <= entry.mode <= 0o777 or entry.size < 0:
            return f"entry {entry.path!r}: bad mode or size"
        kinds[entry.path] = entry.type
        previous = entry.path
    return None


def _path_problem(path: str) -> str | None:
    if not path or path.startswith("/") or "\x00" in path:
        return "must be a non-empty relative path"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "must not contain empty, '.' or '..' components"
    return None


def escapes(entry: Entry) -> bool:
    """Whether a symlink's target, read lexically from its own directory, leaves the tree."""
    target = entry.target or ""
    if not target or target.startswith("/"):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(entry.path), target))
    return resolved == ".." or resolved.startswith("../")


@dataclass(frozen=True)
class TreeDiff:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_json(self) -> dict[str, list[str]]:
        return {"added": list(self.added), "removed": list(self.removed),
                "changed": list(self.changed)}


def diff(before: Manifest, after: Manifest) -> TreeDiff:
    """Paths added, removed, or changed (content, mode, type or target) from before to after."""
    old, new = before.by_path(), after.by_path()
    return TreeDiff(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        changed=tuple(sorted(p for p in old.keys() & new.keys() if old[p] != new[p])),
    )


@dataclass(frozen=True)
class Merged:
    manifest: Manifest
    conflicts: tuple[str, ...]  # paths both sides changed: the step's version was kept


def merge(head: Manifest, base: Manifest, mine: Manifest) -> Merged:
    """``head`` plus the changes one step made: from ``base`` (its workspace when it
    started) to ``mine`` (when it ended). ``head`` is what the session's other steps
    committed meanwhile, on other hosts. A path the step did not change keeps head's entry;
    one it changed (or deleted) takes the step's. A path head changed too is a conflict: the
    step, committing last, wins. The result stays a valid tree: a directory an entry needs is
    kept (from either side); an entry under a path that is no longer a directory is dropped
    (a conflict too)."""
    h, b, m = head.by_path(), base.by_path(), mine.by_path()
    out = dict(h)
    conflicts = set()
    for path in b.keys() | m.keys():
        before, after = b.get(path), m.get(path)
        if before == after:
            continue
        if h.get(path) != before and h.get(path) != after:
            conflicts.add(path)
        if after is None:
            out.pop(path, None)
        else:
            out[path] = after
    kept: dict[str, Entry] = {}
    for path in sorted(out):
        parent = posixpath.dirname(path)
        while parent and parent not in kept:  # a directory the step deleted, head still uses
            source = h.get(parent) or m.get(parent) or b.get(parent)
            if source is None or source.type != "dir":
                break
            kept[parent] = source
            parent = posixpath.dirname(parent)
        parent = posixpath.dirname(path)
        if parent and (parent not in kept or kept[parent].type != "dir"):
            conflicts.add(path)
            continue
        kept[path] = out[path]
    entries = tuple(kept[p] for p in sorted(kept))
    return Merged(Manifest(entries), tuple(sorted(conflicts)))
