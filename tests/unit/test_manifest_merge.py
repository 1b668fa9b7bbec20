"""Merging one step's changes onto what other hosts committed meanwhile (snapshot_manifest.merge)."""

from __future__ import annotations

import random

from onebox.sandbox.snapshot_manifest import Entry, Manifest, merge, validate

SHA = "%064x"


def _tree(files: dict[str, int], dirs: tuple[str, ...] = ()) -> Manifest:
    entries = {d: Entry(d, "dir", 0o755) for d in dirs}
    for path, content in files.items():
        parts = path.split("/")
        for n in range(1, len(parts)):
            entries.setdefault("/".join(parts[:n]), Entry("/".join(parts[:n]), "dir", 0o755))
        entries[path] = Entry(path, "file", 0o644, 1, SHA % content)
    return Manifest(tuple(entries[p] for p in sorted(entries)))


def _files(manifest: Manifest) -> dict[str, int]:
    return {e.path: int(e.sha256 or "0", 16) for e in manifest.files()}


def test_two_hosts_each_adding_files_end_with_both() -> None:
    base = _tree({"input.csv": 1})
    head = _tree({"input.csv": 1, "out/a.txt": 2})       # host A's step committed first
    mine = _tree({"input.csv": 1, "out/b.txt": 3})       # host B's step, from the same base
    merged = merge(head, base, mine)
    assert _files(merged.manifest) == {"input.csv": 1, "out/a.txt": 2, "out/b.txt": 3}
    assert merged.conflicts == () and validate(merged.manifest) is None


def test_a_deletion_and_an_edit_travel_and_a_clash_is_named() -> None:
    base = _tree({"keep": 1, "gone": 2, "both": 3})
    head = _tree({"keep": 1, "gone": 2, "both": 4})
    mine = _tree({"keep": 1, "both": 5})
    merged = merge(head, base, mine)
    assert _files(merged.manifest) == {"keep": 1, "both": 5}
    assert merged.conflicts == ("both",)


def test_a_directory_deleted_by_the_step_stays_for_what_head_put_in_it() -> None:
    base = _tree({"d/x": 1})
    head = _tree({"d/x": 1, "d/y": 2})
    mine = _tree({})
    merged = merge(head, base, mine)
    assert _files(merged.manifest) == {"d/y": 2}
    assert validate(merged.manifest) is None


def test_a_directory_turned_into_a_file_drops_what_head_put_under_it() -> None:
    base = _tree({"d/x": 1})
    head = _tree({"d/x": 1, "d/y": 2})
    mine = _tree({"d": 9})
    merged = merge(head, base, mine)
    assert _files(merged.manifest) == {"d": 9}
    assert "d/y" in merged.conflicts and validate(merged.manifest) is None


def test_any_three_trees_merge_into_a_valid_tree_with_every_change_of_the_step() -> None:
    rng = random.Random(7)
    names = ["a", "b", "c", "d/a", "d/b", "d/e/f", "g/h"]
    for _ in range(500):
        def pick() -> dict[str, int]:
            chosen = {n: rng.randint(1, 3) for n in names if rng.random() < 0.5}
            if "d" in chosen and any(k.startswith("d/") for k in chosen):
                chosen.pop("d")
            return chosen
        base, head, mine = _tree(pick()), _tree(pick()), _tree(pick())
        merged = merge(head, base, mine)
        assert validate(merged.manifest) is None
        got, b, m = _files(merged.manifest), _files(base), _files(mine)
        for path in b.keys() | m.keys():
            if b.get(path) != m.get(path) and path not in merged.conflicts:
                assert got.get(path) == m.get(path), path
        for path, value in _files(head).items():
            if b.get(path) == m.get(path) and path not in merged.conflicts:
                assert got.get(path) == value, path
