"""Pure fusion of ranked lists (full-text, vector) into one ranking.

Two methods, both weighted and both scaled to [0, 1] so that a candidate found
first by every retriever scores 1.0:

- ``rrf``: sum of w / (k + rank), divided by its maximum sum(w) / (k + 1).
- ``score``: per-list min-max normalisation, then a weighted mean. When a list
  has one candidate or all its scores tie, each of them normalises to 1.0 (a
  match), never to 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

FusionMethod = Literal["rrf", "score"]
Ranked = Sequence[tuple[Hashable, float]]  # (id, raw score), best first


@dataclass
class Fused:
    id: Hashable
    score: float
    raw: dict[str, float] = field(default_factory=dict)  # retriever -> raw score
    rank: dict[str, int] = field(default_factory=dict)  # retriever -> 1-based rank


def normalise_scores(ranked: Ranked) -> dict[Hashable, float]:
    if not ranked:
        return {}
    scores = [s for _, s in ranked]
    low, high = min(scores), max(scores)
    if high - low <= 1e-12:
        return {i: 1.0 for i, _ in ranked}
    return {i: (s - low) / (high - low) for i, s in ranked}


def fuse(
    lists: Mapping[str, Ranked],
    weights: Mapping[str, float],
    method: FusionMethod = "rrf",
    rrf_k: int = 60,
) -> list[Fused]:
    """Fuse ranked lists; lists with weight 0 only contribute their raw scores for display."""
    fused: dict[Hashable, Fused] = {}
    for name, ranked in lists.items():
        for rank, (item, raw) in enumerate(ranked, start=1):
            entry = fused.setdefault(item, Fused(item, 0.0))
            entry.raw[name], entry.rank[name] = raw, rank
    active = {n: w for n, w in weights.items() if w > 0 and n in lists}
    total = sum(active.values()) or 1.0
    for name, weight in active.items():
        if method == "rrf":
            scale = (rrf_k + 1) / total
            for rank, (item, _) in enumerate(lists[name], start=1):
                fused[item].score += weight * scale / (rrf_k + rank)
        else:
            for item, norm in normalise_scores(lists[name]).items():
                fused[item].score += weight * norm / total
    return sorted(fused.values(), key=lambda f: (-f.score, -max(f.raw.values(), default=0.0)))
