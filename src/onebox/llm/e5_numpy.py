"""multilingual-e5-small in numpy: the bundled weights, dequantised, on a fast BLAS.

    encoder = NumpyE5Encoder(load_e5_weights())
    matrix = encoder.encode(["doc a", "doc b"], is_query=False)   # (2, 384), L2-normalised

The bundled C engine multiplies 4-bit weights by int8 activations with AVX2
only, one text per thread; here the same weights (dequantised once to fp32) run
as fp32 matrix products on numpy's BLAS, which uses AVX-512 and both cores.
Texts are sorted by token count and batched with little padding (a token budget
per batch); padded keys are masked out of attention and padded tokens out of the
mean pool. Like the engine, a text longer than 510 tokens is cut into windows
whose mean-pooled vectors are averaged, weighted by their token counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from onebox.llm.e5_weights import F32, E5Tokenizer, E5Weights

BATCH_TOKENS = 4096  # padded tokens per forward pass (bounds attention memory)
CACHE_ELEMENTS = 32768  # floats per slice of an elementwise pass (128 KiB)
_ERF = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


@dataclass(frozen=True)
class _Layer:
    qkv_w: F32  # [hidden, 3*hidden], transposed for x @ w
    qkv_b: F32
    out_w: F32
    out_b: F32
    ln1: tuple[F32, F32]
    ffn_in_w: F32
    ffn_in_b: F32
    ffn_out_w: F32
    ffn_out_b: F32
    ln2: tuple[F32, F32]


@dataclass(frozen=True)
class _Window:
    text: int  # index of the text this window belongs to
    ids: list[int]  # <s> content </s>


class NumpyE5Encoder:
    """Stateless after construction; safe to call from one thread at a time per instance."""

    def __init__(self, weights: E5Weights, batch_tokens: int = BATCH_TOKENS) -> None:
        self.weights = weights
        self.config = weights.config
        self.batch_tokens = batch_tokens
        self.layers = [_layer(weights, i) for i in range(self.config.layers)]
        t = weights.tensors
        self._pos = t["emb.pos"].reshape(self.config.max_positions, -1)
        self._type = t["emb.type"].reshape(-1, self.config.hidden)[0]
        self._emb_ln = (t["emb.ln.w"], t["emb.ln.b"])

    @property
    def dim(self) -> int:
        return self.config.hidden

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(self.weights.tokenizer.encode(_prefixed(text, is_query))) + 2

    def encode(self, texts: list[str], is_query: bool) -> F32:
        batches = self._batches(self._windows(texts, is_query))
        windows = [w for batch in batches for w in batch]
        if not windows:
            return np.zeros((0, self.dim), np.float32)
        pooled = np.concatenate([self._forward([w.ids for w in batch]) for batch in batches])
        return combine_windows(len(texts), windows, pooled)

    def _windows(self, texts: list[str], is_query: bool) -> list[_Window]:
        return make_windows(self.weights.tokenizer, self.config.max_positions - 2, texts, is_query)

    def _batches(self, windows: list[_Window]) -> list[list[_Window]]:
        return batch_windows(windows, self.batch_tokens)

    def _forward(self, sequences: list[list[int]]) -> F32:
        """Mean-pooled last hidden states (not normalised) of each sequence."""
        ids, mask = _pad(sequences)
        x = self._embed(ids)
        key_bias = np.where(mask, 0.0, -1e30).astype(np.float32)[:, None, None, :]
        for layer in self.layers:
            x = self._block(layer, x, key_bias)
        weights = mask.astype(np.float32)
        pooled = np.einsum("blh,bl->bh", x, weights)
        return pooled / weights.sum(axis=1, keepdims=True)

    def _embed(self, ids: npt.NDArray[np.int64]) -> F32:
        batch, length = ids.shape
        x = self.weights.word_rows(ids).reshape(batch, length, self.dim)
        x += self._pos[:length] + self._type
        return _layer_norm(x, *self._emb_ln, self.config.eps)

    def _block(self, layer: _Layer, x: F32, key_bias: F32) -> F32:
        batch, length, hidden = x.shape
        heads = self.config.heads
        qkv = x @ layer.qkv_w + layer.qkv_b
        qkv = np.ascontiguousarray(  # [3, batch, heads, length, head_dim]
            qkv.reshape(batch, length, 3, heads, hidden // heads).transpose(2, 0, 3, 1, 4))
        context = np.empty((batch, length, hidden), np.float32)
        for row in range(batch):
            _attend(qkv[:, row], key_bias[row, 0, 0], context[row])
        x = _layer_norm(x + (context @ layer.out_w + layer.out_b), *layer.ln1, self.config.eps)
        middle = x @ layer.ffn_in_w + layer.ffn_in_b
        _in_slices(middle, _gelu_inplace)
        return _layer_norm(x + (middle @ layer.ffn_out_w + layer.ffn_out_b), *layer.ln2,
                           self.config.eps)


def _attend(qkv: F32, key_bias: F32, out: F32) -> None:
    """One sequence's attention, head by head: plain 2-D products run at BLAS speed
    (numpy's stacked matmul of [heads, length, 32] runs several times slower), each
    head's score matrix stays in cache, and the softmax's division is applied to the
    [length, 32] result instead of the [length, length] scores."""
    q, k, v = qkv
    heads, _, head_dim = q.shape
    q = q * np.float32(head_dim ** -0.5)
    padded = bool(key_bias.min() < 0)
    for head in range(heads):
        scores = q[head] @ k[head].T
        if padded:
            scores += key_bias
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)  # masked keys: exp(-1e30) is exactly 0
        total = scores.sum(axis=1, keepdims=True)
        out[:, head * head_dim : (head + 1) * head_dim] = (scores @ v[head]) / total


def make_windows(tok: E5Tokenizer, width: int, texts: list[str], is_query: bool) -> list[_Window]:
    """Each text's ``<s> ids </s>`` windows of at most ``width`` content tokens."""
    out: list[_Window] = []
    for index, text in enumerate(texts):
        ids = tok.encode(_prefixed(text, is_query))
        for start in range(0, max(len(ids), 1), width):
            out.append(_Window(index, [tok.bos, *ids[start : start + width], tok.eos]))
    return out


def batch_windows(windows: list[_Window], batch_tokens: int) -> list[list[_Window]]:
    """Shortest first; a batch holds at most ``batch_tokens`` padded tokens."""
    ordered = sorted(windows, key=lambda w: len(w.ids))
    batches: list[list[_Window]] = []
    current: list[_Window] = []
    for window in ordered:
        if current and (len(current) + 1) * len(window.ids) > batch_tokens:
            batches.append(current)
            current = []
        current.append(window)
    return batches + [current] if current else batches


def combine_windows(n_texts: int, windows: list[_Window], pooled: F32) -> F32:
    """Windows' mean-pooled vectors -> one L2-normalised row per text, weighted by tokens."""
    sums = np.zeros((n_texts, pooled.shape[1]), np.float64)
    for window, vector in zip(windows, pooled, strict=True):
        sums[window.text] += max(len(window.ids) - 2, 1) * vector
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return (sums / np.maximum(norms, 1e-12)).astype(np.float32)


def _prefixed(text: str, is_query: bool) -> str:
    return ("query: " if is_query else "passage: ") + text


def _layer(weights: E5Weights, index: int) -> _Layer:
    t, h, ff = weights.tensors, weights.config.hidden, weights.config.ffn

    def mat(name: str, rows: int, cols: int) -> F32:
        return np.ascontiguousarray(t[f"l{index}.{name}"].reshape(rows, cols).T)

    qkv_w = np.ascontiguousarray(np.concatenate(
        [mat("q.w", h, h), mat("k.w", h, h), mat("v.w", h, h)], axis=1))
    qkv_b = np.concatenate([t[f"l{index}.q.b"], t[f"l{index}.k.b"], t[f"l{index}.v.b"]])
    return _Layer(
        qkv_w, qkv_b, mat("ao.w", h, h), t[f"l{index}.ao.b"],
        (t[f"l{index}.aln.w"], t[f"l{index}.aln.b"]),
        mat("fi.w", ff, h), t[f"l{index}.fi.b"], mat("fo.w", h, ff), t[f"l{index}.fo.b"],
        (t[f"l{index}.oln.w"], t[f"l{index}.oln.b"]))


def _pad(sequences: list[list[int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    length = max(len(s) for s in sequences)
    ids = np.zeros((len(sequences), length), np.int64)
    mask = np.zeros((len(sequences), length), np.bool_)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = True
    return ids, mask


def _layer_norm(x: npt.NDArray[np.floating[Any]], weight: F32, bias: F32, eps: float) -> F32:
    x = x - x.mean(axis=-1, keepdims=True)
    x *= 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(eps))
    x *= weight
    x += bias
    return x


def _in_slices(x: F32, fn: Callable[[F32], None], max_elements: int = CACHE_ELEMENTS) -> None:
    """Apply an in-place elementwise ``fn`` slice by slice, each small enough to stay
    in cache (numpy otherwise streams the whole array through memory once per op)."""
    rows = x.reshape(-1, x.shape[-1])
    step = max(1, max_elements // x.shape[-1])
    for start in range(0, rows.shape[0], step):
        fn(rows[start : start + step])


def _gelu_inplace(x: F32) -> None:
    x[...] = _gelu(x)


def _gelu(x: F32) -> F32:
    """Exact GELU, 0.5·x·(1 + erf(x/√2)), erf by Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)."""
    z = np.abs(x) * np.float32(0.7071067811865476)
    np.minimum(z, np.float32(6.0), out=z)  # erf(6) is 1 in fp32; exp(-z²) stays normal
    t = np.float32(0.3275911) * z
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * np.float32(_ERF[4])
    for coefficient in _ERF[3:0:-1]:
        poly += np.float32(coefficient)
        poly *= t
    poly += np.float32(_ERF[0])
    poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x|/√2)
    np.copysign(poly, x, out=poly)
    poly -= np.copysign(np.float32(1.0), x)  # -erf(x/√2)
    poly *= x
    return np.float32(0.5) * x - np.float32(0.5) * poly
