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


def test_every_test_module_lives_in_a_tier() -> None:
    """The tiers (conftest.TIERS) are directories; a module elsewhere would be in none and
    `make check` or a tier run would silently skip it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    TIERS = root.TIERS
    stray = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
             if p.relative_to(TESTS).parts[0] not in TIERS]
    assert stray == []
    assert {p.name for p in TESTS.iterdir() if p.is_dir() and p.name in TIERS} == set(TIERS)
