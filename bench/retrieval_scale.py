"""Scale data for the speed runs: real text, vectors derived from real embeddings.

Embedding 100,000 chunks with the bundled model takes hours on two cores, so the
scale collection is built from real passages in two steps:

- ``n_base`` real passages (SciFact titles + abstract openings, or LoCoMo turns)
  go through the real model;
- every scale row takes the text of one real passage window and the vector of
  its base passage moved along the difference of two other real vectors
  (``v = normalise(base + spread * (b - c))``). The moves stay inside the cone
  the model's vectors occupy (random Gaussian noise would leave it, which makes
  the index's job artificially easy or hard), and each base gets a cluster of
  neighbours at a cosine comparable to real chunks of one document.

Query vectors always come from the real model.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

SPREAD = 0.5


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?。！？])\s*", text) if s.strip()]


def scifact_windows(corpus: list[dict[str, Any]], n_docs: int, per_doc: int) -> list[tuple[int, str]]:
    """(base index, text) rows: ``per_doc`` windows of three sentences from each of ``n_docs``
    abstracts, each window prefixed with its title, as a chunk carries its heading."""
    rows = []
    for base, doc in enumerate(corpus[:n_docs]):
        sents = sentences(doc["text"]) or [doc["title"]]
        for j in range(per_doc):
            start = j % len(sents)
            window = " ".join((sents + sents)[start:start + 3])
            rows.append((base, f"{doc['title']}\n{window}"))
    return rows


def base_texts(corpus: list[dict[str, Any]], n_docs: int) -> list[str]:
    """What the model embeds for each base: the title and the abstract's first sentence."""
    return [f"{d['title']}\n{(sentences(d['text']) or [''])[0]}" for d in corpus[:n_docs]]


def derive_vectors(base: np.ndarray, owners: list[int], seed: int) -> tuple[np.ndarray, dict[str, float]]:
    """One vector per row, near its owner's base vector; returns the matrix and cosine stats."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, len(base), len(owners))
    c = rng.integers(0, len(base), len(owners))
    idx = np.asarray(owners)
    out = base[idx] + SPREAD * (base[b] - base[c])
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    to_parent = np.einsum("ij,ij->i", out, base[idx])
    sample = rng.choice(len(base), size=min(len(base), 300), replace=False)
    between = base[sample] @ base[sample].T
    return out.astype(np.float32), {
        "cosine_to_own_base_mean": round(float(to_parent.mean()), 3),
        "cosine_to_own_base_p5": round(float(np.percentile(to_parent, 5)), 3),
        "cosine_between_real_bases_mean": round(float(between[np.triu_indices(len(sample), 1)].mean()), 3),
    }


def describe(n_base: int, what: str) -> str:
    return (f"real text; {n_base} {what} embedded by the real model, every other row's vector "
            f"is its base vector moved by {SPREAD} x (difference of two other real vectors), "
            "normalised; query vectors from the real model")
