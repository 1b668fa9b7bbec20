"""Test doubles for knowledge tests (kept out of conftest so test modules can import them)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector


class HashEmbeddingModel(EmbeddingModel):
    """Deterministic pseudo-random unit vectors from the text hash: for scale and filter tests
    where the model's quality is not what is being tested."""

    dim = 384

    def __init__(self, name: str = "test/hash-384") -> None:
        self.name = name
        self.calls = 0

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        self.calls += len(texts)
        return [_hash_vector(t) for t in texts]


def _hash_vector(text: str) -> Vector:
    out: list[float] = []
    counter = 0
    while len(out) < 384:
        block = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((b - 127.5) / 127.5 for b in block)
        counter += 1
    norm = math.sqrt(sum(x * x for x in out[:384]))
    return [x / norm for x in out[:384]]
