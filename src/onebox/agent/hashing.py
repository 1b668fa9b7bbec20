"""Canonical hashing: the same data always gives the same sha256, whatever its key order.

Canonical form: JSON with sorted keys, no insignificant whitespace, UTF-8 (not
ASCII-escaped), floats as Python's shortest round-trip repr, tuples as lists.
NaN and infinities are refused: they have no JSON form.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: Any) -> str:
    """sha256 (64 hex chars) of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))
