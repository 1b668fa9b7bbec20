"""Close matches for a mistyped name, as one phrase a message can end with."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_match(word: str, choices: Iterable[str]) -> str | None:
    """The choice nearest to ``word`` when one is near enough to be a typo of it, else None."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'review'?"`` for a near choice, else ``""``."""
    match = close_match(word, choices)
    return f"; did you mean '{match}'?" if match else ""
