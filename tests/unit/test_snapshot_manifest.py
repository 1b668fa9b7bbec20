"""The manifest: canonical bytes, validation of stored manifests, symlink escapes, diffs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onebox.errors import IntegrityError
from onebox.sandbox.snapshot_manifest import Entry, Manifest, diff, escapes

SHA = "a" * 64


def test_canonical_bytes_roundtrip() -> None:
    m = Manifest((Entry("d", "dir", 0o755), Entry("d/f", "file", 0o644, 3, SHA),
                  Entry("l", "symlink", 0, target="d/f")))
    again = Manifest.from_bytes(m.to_bytes())
    assert again == m and again.sha256 == m.sha256
    assert b" " not in m.to_bytes()


@pytest.mark.parametrize("entries", [
    [{"path": "../x", "type": "dir", "mode": 493}],
    [{"path": "/abs", "type": "dir", "mode": 493}],
    [{"path": "a/./b", "type": "dir", "mode": 493}],
    [{"path": "nodir/f", "type": "file", "mode": 420, "size": 1, "sha256": SHA}],
    [{"path": "l", "type": "symlink", "mode": 0, "target": "x"},
     {"path": "l/f", "type": "file", "mode": 420, "size": 1, "sha256": SHA}],
    [{"path": "b", "type": "dir", "mode": 493}, {"path": "a", "type": "dir", "mode": 493}],
    [{"path": "f", "type": "file", "mode": 0o4755, "size": 1, "sha256": SHA}],
    [{"path": "f", "type": "file", "mode": 420, "size": 1, "sha256": "nothex"}],
    [{"path": "p", "type": "fifo", "mode": 420}],
])
def test_unsafe_or_inconsistent_manifests_are_refused(entries: list[dict[str, object]]) -> None:
    import json

    data = json.dumps({"format": "onebox-snapshot/1", "entries": entries}).encode()
    with pytest.raises(IntegrityError, match="manifests/x"):
        Manifest.from_bytes(data, source="manifests/x")


@pytest.mark.parametrize(("path", "target", "outside"), [
    ("a", "/etc/passwd", True), ("a", "..", True), ("d/a", "../../x", True),
    ("d/a", "../x", False), ("a", "b/c", False), ("d/e/a", "../../f", False), ("a", "", True),
])
def test_symlink_escape_is_judged_from_the_link_directory(
    path: str, target: str, outside: bool
) -> None:
    assert escapes(Entry(path, "symlink", 0, target=target)) is outside


def test_diff_lists_added_removed_and_changed_paths() -> None:
    before = Manifest((Entry("a", "file", 0o644, 1, SHA), Entry("b", "file", 0o644, 1, SHA),
                       Entry("c", "file", 0o644, 1, SHA)))
    after = Manifest((Entry("a", "file", 0o644, 1, SHA), Entry("b", "file", 0o600, 1, SHA),
                      Entry("d", "file", 0o644, 1, "b" * 64)))
    d = diff(before, after)
    assert (d.added, d.removed, d.changed) == (("d",), ("c",), ("b",))
    assert diff(after, after).empty


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(
    st.text(min_size=1, max_size=12).filter(lambda p: "\x00" not in p),
    st.sampled_from(["file", "dir", "symlink"]), st.integers(0, 0o777),
    st.integers(0, 1 << 40), st.booleans(), st.text(max_size=8)), max_size=30))
def test_the_canonical_bytes_are_json_dumps_of_the_whole_document(raw: list) -> None:
    """A manifest's hash names stored objects: its bytes are exactly json.dumps of the
    document with sorted keys, however they are assembled (per entry, cached)."""
    import hashlib
    import json

    from onebox.sandbox.snapshot_manifest import FORMAT, Entry, Manifest

    entries = []
    for n, (path, kind, mode, size, sparse, target) in enumerate(raw):
        digest = hashlib.sha256(f"{n}".encode()).hexdigest()
        if kind == "file":
            entries.append(Entry(f"{path}{n}", "file", mode, size, digest,
                                 extents=((0, 1), (size, 2)) if sparse else None,
                                 data_sha256=digest if sparse else None))
        elif kind == "symlink":
            entries.append(Entry(f"{path}{n}", "symlink", mode, target=target))
        else:
            entries.append(Entry(f"{path}{n}", "dir", mode))
    manifest = Manifest(tuple(sorted(entries, key=lambda e: e.path)))
    expected = json.dumps({"format": FORMAT, "entries": [e.to_json() for e in manifest.entries]},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert manifest.to_bytes() == expected
    assert Manifest(manifest.entries).sha256 == hashlib.sha256(expected).hexdigest()
