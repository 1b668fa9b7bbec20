"""Typed results of the SDK: frozen dataclasses built from the API's JSON.

Each type keeps the whole JSON object in ``raw`` so a field the API adds later is never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "DEAD"})
Json = dict[str, Any]


@dataclass(frozen=True)
class Run:
    id: str
    status: str
    answer: str | None
    steps: list[Json]
    error: str | None
    usage: Json
    raw: Json = field(repr=False, default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_detail(cls, data: Json) -> Run:
        run = data.get("run", data)
        usage = {k: run.get(k) for k in ("tokens", "cost_usd", "model_calls", "duration_ms")
                 if k in run}
        return cls(id=str(run["id"]), status=str(run["status"]), answer=run.get("answer"),
                   steps=list(data.get("steps", [])), error=run.get("error"), usage=usage,
                   raw=data)


@dataclass(frozen=True)
class Submitted:
    run_id: str
    trace_id: str | None
    existing: bool


@dataclass(frozen=True)
class Event:
    seq: int
    type: str
    data: Json

    @property
    def payload(self) -> Json:
        value = self.data.get("payload")
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class CellOutput:
    data: dict[str, str]
    is_main_result: bool = False

    @property
    def text(self) -> str | None:
        return self.data.get("text/plain")


@dataclass(frozen=True)
class CellError:
    name: str
    value: str
    traceback: str


@dataclass(frozen=True)
class ExecResult:
    """One execution in a session: a one-shot run (exit_code) or an interpreter cell
    (results, error, execution_count, state_lost). ``exit_code`` is always set: an
    interpreter error is 1, a timeout 124."""

    stdout: str
    stderr: str
    exit_code: int
    ok: bool
    timed_out: bool = False
    truncated: bool = False
    duration_ms: float = 0.0
    memory_peak_mb: float | None = None
    files_written: list[Json] = field(default_factory=list)
    blocked_network: list[Json] = field(default_factory=list)
    results: list[CellOutput] = field(default_factory=list)
    error: CellError | None = None
    execution_count: int | None = None
    state_lost: bool = False
    restart_reason: str | None = None
    raw: Json = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: Json) -> ExecResult:
        error = data.get("error")
        cell_error = CellError(str(error.get("name", "")), str(error.get("value", "")),
                               str(error.get("traceback", ""))) \
            if isinstance(error, dict) else None
        timed_out = bool(data.get("timed_out"))
        return cls(
            stdout=str(data.get("stdout") or ""), stderr=str(data.get("stderr") or ""),
            exit_code=_exit_code(data, cell_error, timed_out), ok=bool(data.get("ok")),
            timed_out=timed_out, truncated=bool(data.get("truncated")),
            duration_ms=float(data.get("duration_ms") or 0.0),
            memory_peak_mb=data.get("memory_peak_mb"),
            files_written=list(data.get("files_written") or []),
            blocked_network=list(data.get("blocked_network") or []),
            results=[CellOutput(dict(r.get("data", {})), bool(r.get("is_main_result")))
                     for r in data.get("results") or []],
            error=cell_error, execution_count=data.get("execution_count"),
            state_lost=bool(data.get("state_lost")), restart_reason=data.get("restart_reason"),
            raw=data)


def _exit_code(data: Json, error: CellError | None, timed_out: bool) -> int:
    if timed_out:
        return 124
    code = data.get("exit_code")
    if isinstance(code, int):
        return code
    if error is not None and error.name == "SystemExit":  # sys.exit(n) in the interpreter
        value = error.value.strip()
        return int(value) if value.isdigit() else 0 if value in ("", "None") else 1
    return 1 if error is not None or not data.get("ok", True) else 0


@dataclass(frozen=True)
class RunFile:
    path: str
    size_bytes: int | None
    sha256: str | None
    step_id: str | None
    raw: Json = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: Json) -> RunFile:
        size = data.get("size_bytes", data.get("size"))
        return cls(path=str(data["path"]), size_bytes=size, sha256=data.get("sha256"),
                   step_id=data.get("step_id"), raw=data)


@dataclass(frozen=True)
class SessionInfo:
    id: str
    raw: Json = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    id: str
    session_id: str | None
    run_id: str | None
    status: str | None
    raw: Json = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: Json) -> Snapshot:
        run_id = data.get("run_id")
        return cls(id=str(data["id"]), session_id=data.get("session_id"),
                   run_id=str(run_id) if run_id else None, status=data.get("status"), raw=data)


@dataclass(frozen=True)
class SearchHit:
    text: str
    score: float | None
    source: str | None
    collection: str | None
    raw: Json = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: Json) -> SearchHit:
        document = data.get("document") or {}
        scores = data.get("scores") or {}
        return cls(text=str(data.get("content", "")), score=scores.get("fused"),
                   source=document.get("source"), collection=document.get("collection"),
                   raw=data)


@dataclass(frozen=True)
class Memory:
    id: str
    content: str
    scope: str | None
    score: float | None = None
    deduplicated: bool = False
    raw: Json = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: Json) -> Memory:
        return cls(id=str(data["id"]), content=str(data.get("content", "")),
                   scope=data.get("scope"), score=(data.get("scores") or {}).get("fused"),
                   deduplicated=bool(data.get("deduplicated")), raw=data)
