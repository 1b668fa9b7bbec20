"""The suite's own layout: two test modules with one basename cannot be collected together
(tests/ has no packages), which fails the whole run, not one test."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_its_own_basename() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1], (
        "rename one of each pair: " + ", ".join(sorted(
            str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if names[p.name] > 1)))
