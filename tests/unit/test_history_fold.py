"""The pure rules of a run's files as one history (onebox.snapshots.history): change sets,
the fold in plan order, overwrites, a tree kept whole."""

from __future__ import annotations

import random

from onebox.sandbox.snapshot_manifest import Entry, Manifest, validate
from onebox.snapshots.history import StepChanges, change_set, compose, fold

D = 0o755


def f(path: str, text: str) -> Entry:
    import hashlib

    return Entry(path, "file", 0o644, len(text), hashlib.sha256(text.encode()).hexdigest())


def d(path: str) -> Entry:
    return Entry(path, "dir", D)


def tree(*entries: Entry) -> Manifest:
    return Manifest(tuple(sorted(entries, key=lambda e: e.path)))


def test_a_change_set_is_what_turned_one_tree_into_the_other() -> None:
    before = tree(f("a", "1"), f("b", "2"), d("dir"), f("dir/c", "3"))
    after = tree(f("a", "1"), f("b", "changed"), d("dir"), f("new", "4"))
    assert change_set(before, after) == {"b": f("b", "changed"), "dir/c": None,
                                         "new": f("new", "4")}
    assert change_set(after, after) == {}


def test_composed_change_sets_do_what_they_do_one_after_the_other() -> None:
    assert compose([{"a": 1, "b": 2}, {"b": None, "c": 3}]) == {"a": 1, "b": None, "c": 3}


def test_a_later_step_of_the_plan_wins_an_overwrite_whichever_order_they_came_in() -> None:
    base = tree(f("shared", "base"))
    p1 = StepChanges("p1", 2, {"shared": f("shared", "p1")})
    p2 = StepChanges("p2", 3, {"shared": f("shared", "p2")})
    ancestors = {"p1": frozenset(), "p2": frozenset()}
    for steps in ([p1, p2], [p2, p1]):
        out = fold(base, steps, ancestors)
        assert out.manifest == tree(f("shared", "p2"))
        assert [(o.path, o.kept, o.lost) for o in out.overwrites] == [("shared", "p2", "p1")]


def test_a_step_changing_what_its_ancestor_wrote_is_no_overwrite() -> None:
    first = StepChanges("first", 1, {"x": f("x", "1")})
    then = StepChanges("then", 2, {"x": f("x", "2")})
    out = fold(Manifest(()), [first, then], {"first": frozenset(), "then": frozenset({"first"})})
    assert out.manifest == tree(f("x", "2")) and out.overwrites == ()


def test_a_retry_goes_on_from_its_failed_attempt_without_an_overwrite() -> None:
    one = StepChanges("s", 1, {"marker": f("marker", "")}, attempt=1)
    two = StepChanges("s", 1, {"out": f("out", "ok")}, attempt=2)
    out = fold(Manifest(()), [two, one], {"s": frozenset()})
    assert out.manifest == tree(f("marker", ""), f("out", "ok")) and out.overwrites == ()


def test_a_file_added_in_a_directory_a_sibling_removed_keeps_a_whole_tree() -> None:
    base = tree(d("dir"), f("dir/old", "o"))
    remover = StepChanges("rm", 1, {"dir": None, "dir/old": None})
    adder = StepChanges("add", 2, {"dir/new": f("dir/new", "n")})
    out = fold(base, [remover, adder], {"rm": frozenset(), "add": frozenset()})
    assert validate(out.manifest) is None
    assert {e.path for e in out.manifest.entries} == {"dir", "dir/new"}
    assert ("dir", "add", "rm") in {(o.path, o.kept, o.lost) for o in out.overwrites}


def test_an_entry_under_a_path_a_later_step_made_a_file_is_dropped() -> None:
    base = tree(d("p"), f("p/x", "1"))
    writer = StepChanges("w", 1, {"p/y": f("p/y", "2")})
    replacer = StepChanges("r", 2, {"p": f("p", "file now"), "p/x": None})
    out = fold(base, [writer, replacer], {"w": frozenset(), "r": frozenset()})
    assert validate(out.manifest) is None
    assert out.manifest == tree(f("p", "file now"))
    assert ("p/y", "r", "w") in {(o.path, o.kept, o.lost) for o in out.overwrites}


def test_the_fold_depends_on_the_plan_not_on_the_order_commits_arrive() -> None:
    rng = random.Random(7)
    names = ["a", "b", "c", "d/e", "d/f"]
    for _ in range(200):
        steps = []
        for n in range(rng.randint(1, 6)):
            changes: dict[str, Entry | None] = {}
            for name in rng.sample(names, rng.randint(1, 3)):
                changes[name] = None if rng.random() < 0.3 else f(name, f"{n}{rng.random()}")
                if "/" in name and changes[name] is not None:
                    changes["d"] = d("d")
            steps.append(StepChanges(f"s{n}", n, changes))
        ancestors = {s.step_id: frozenset(rng.sample([t.step_id for t in steps[:i]],
                                                      rng.randint(0, i)))
                     for i, s in enumerate(steps)}
        first = fold(Manifest(()), steps, ancestors)
        shuffled = steps[:]
        rng.shuffle(shuffled)
        again = fold(Manifest(()), shuffled, ancestors)
        assert first == again and validate(first.manifest) is None
