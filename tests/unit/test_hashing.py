"""Canonical hashing: equal data gives equal hashes whatever the key order or container type."""

from __future__ import annotations

import math

import pytest

from onebox.agent.hashing import canonical_hash, canonical_json


def test_key_order_does_not_matter() -> None:
    assert canonical_hash({"a": 1, "b": [1, 2]}) == canonical_hash({"b": [1, 2], "a": 1})


def test_tuples_and_lists_hash_alike() -> None:
    assert canonical_hash({"x": (1, 2)}) == canonical_hash({"x": [1, 2]})


def test_values_change_the_hash() -> None:
    assert canonical_hash({"code": "print(1)"}) != canonical_hash({"code": "print(2)"})
    assert canonical_hash({"n": 1}) != canonical_hash({"n": "1"})


def test_unicode_is_utf8_not_escaped_and_stable() -> None:
    assert canonical_json({"t": "数据"}) == '{"t":"数据"}'.encode()
    assert len(canonical_hash({"t": "数据"})) == 64


def test_known_vector() -> None:
    # sha256 of b'{"a":1}'
    assert canonical_hash({"a": 1}) == (
        "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
    )


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError):
        canonical_hash({"x": math.nan})
