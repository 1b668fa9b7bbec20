"""e5's long texts as windows: a text longer than the model's positions is cut into
windows of at most ``width`` content tokens, each framed by ``<s>`` and ``</s>``; their
mean-pooled vectors are averaged, weighted by their token counts, as the bundled C engine
does (:mod:`onebox.llm.e5_onnx` runs the windows)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onebox.llm.e5_weights import F32, E5Tokenizer


@dataclass(frozen=True)
class Window:
    text: int  # index of the text this window belongs to
    ids: list[int]  # <s> content </s>


def make_windows(tok: E5Tokenizer, width: int, texts: list[str], is_query: bool) -> list[Window]:
    """Each text's ``<s> ids </s>`` windows of at most ``width`` content tokens."""
    out: list[Window] = []
    for index, text in enumerate(texts):
        ids = tok.encode(_prefixed(text, is_query))
        for start in range(0, max(len(ids), 1), width):
            out.append(Window(index, [tok.bos, *ids[start : start + width], tok.eos]))
    return out


def combine_windows(n_texts: int, windows: list[Window], pooled: F32) -> F32:
    """Windows' mean-pooled vectors -> one L2-normalised row per text, weighted by tokens."""
    sums = np.zeros((n_texts, pooled.shape[1]), np.float64)
    for window, vector in zip(windows, pooled, strict=True):
        sums[window.text] += max(len(window.ids) - 2, 1) * vector
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return (sums / np.maximum(norms, 1e-12)).astype(np.float32)


def _prefixed(text: str, is_query: bool) -> str:
    return ("query: " if is_query else "passage: ") + text
