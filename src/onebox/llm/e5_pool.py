"""One numpy e5 encoder per core, in worker processes, for passage batches.

    pool = E5ProcessPool(processes=2)
    matrix = pool.encode(texts, is_query=False)     # (n, 384) float32, normalised
    pool.close()

Each worker (``python -m onebox.llm.e5_pool``) loads the bundled weights once and
runs its BLAS single-threaded: on two cores, two single-threaded encoders beat one
two-threaded encoder (tokenising, softmax and GELU are single-threaded numpy, and
BLAS threads that wait on each other stall when the machine is busy). Workers are
plain subprocesses speaking length-prefixed frames on stdin/stdout, so the
caller's ``__main__`` is never re-imported (as multiprocessing's spawn would). A
batch is split into length-balanced shares (sorted by length, dealt round-robin)
so the workers finish together and each still batches similar lengths.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from typing import IO, Any

import numpy as np

from onebox.llm.e5_weights import F32

_HEADER = struct.Struct("<Q")


def default_processes() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _send(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _receive(stream: IO[bytes]) -> bytes:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the e5 worker closed its output")
    (size,) = _HEADER.unpack(header)
    return stream.read(size)


class E5ProcessPool:
    """Worker processes that each hold a :class:`~onebox.llm.e5_numpy.NumpyE5Encoder`.
    Not thread-safe: the caller serialises calls."""

    def __init__(self, processes: int | None = None) -> None:
        self.processes = processes or default_processes()
        self._workers: list[subprocess.Popen[bytes]] = []

    def _start(self) -> list[subprocess.Popen[bytes]]:
        if not self._workers:
            env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
            self._workers = [subprocess.Popen(
                [sys.executable, "-m", "onebox.llm.e5_pool"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, env=env) for _ in range(self.processes)]
        return self._workers

    def encode(self, texts: list[str], is_query: bool) -> F32:
        shares = [s for s in _shares(texts, self.processes) if s]
        workers = self._start()
        try:
            for worker, share in zip(workers, shares, strict=False):
                assert worker.stdin is not None
                _send(worker.stdin, pickle.dumps(([texts[i] for i in share], is_query)))
            results = [_read_matrix(worker, len(share))
                       for worker, share in zip(workers, shares, strict=False)]
        except (OSError, EOFError, ValueError) as exc:
            self.close()
            raise RuntimeError(f"an e5 worker process failed: {exc}") from exc
        out = np.empty((len(texts), results[0].shape[1] if results else 0), np.float32)
        for share, matrix in zip(shares, results, strict=True):
            out[share] = matrix
        return out

    def close(self) -> None:
        workers, self._workers = self._workers, []
        for worker in workers:
            if worker.stdin is not None:
                worker.stdin.close()
        for worker in workers:
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()


def _read_matrix(worker: subprocess.Popen[bytes], rows: int) -> F32:
    assert worker.stdout is not None
    data = _receive(worker.stdout)
    return np.frombuffer(data, np.float32).reshape(rows, -1)


def _shares(texts: list[str], n: int) -> list[list[int]]:
    """Indices dealt round-robin by descending length: equal work, similar lengths."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    return [order[k::n] for k in range(n)]


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The worker loop: a pickled ``(texts, is_query)`` in, raw float32 rows out."""
    from onebox.llm.e5_numpy import NumpyE5Encoder
    from onebox.llm.e5_weights import load_e5_weights

    encoder = NumpyE5Encoder(load_e5_weights())
    while True:
        try:
            request: Any = pickle.loads(_receive(stdin))
        except EOFError:
            return
        texts, is_query = request
        _send(stdout, np.ascontiguousarray(encoder.encode(texts, is_query)).tobytes())


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
