"""The manifest: canonical bytes, validation of stored manifests, symlink escapes, diffs."""

from __future__ import annotations

import pytest

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
