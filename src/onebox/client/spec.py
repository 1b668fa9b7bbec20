"""What each SDK call sends and how its answer is read: pure, shared by Client and AsyncClient.

The two clients differ only in how they send a ``Call`` (blocking or awaited) and stream.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from onebox.client.types import Event, ExecResult, Json
from onebox.errors import ValidationError

DEFAULT_URL = "http://127.0.0.1:8420"
ADDRESS_FILE = "server-address"
NDJSON = "application/x-ndjson"
TERMINAL_EVENTS = frozenset({"run_succeeded", "run_failed", "run_cancelled", "run_dead"})
# a replay's POST waits this long on the server (under the client's default read timeout);
# a longer replay is followed as the run it is
REPLAY_WAIT_S = 45.0


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    files: Any = None


def home() -> Path:
    return Path(os.environ.get("ONEBOX_HOME") or Path.home() / ".onebox")


def recorded_url(onebox_home: Path | None = None) -> str | None:
    """The address a running local `onebox serve`/`up` recorded in ONEBOX_HOME, if any."""
    try:
        text = ((onebox_home or home()) / ADDRESS_FILE).read_text().strip()
    except OSError:
        return None
    return text or None


def resolve_url(base_url: str | None) -> str:
    url = base_url or os.environ.get("ONEBOX_URL") or recorded_url() or DEFAULT_URL
    if not url.startswith(("http://", "https://")):
        raise ValidationError(f"base_url {url!r} must start with http:// or https://",
                              field="base_url")
    return url.rstrip("/")


def resolve_key(api_key: str | None) -> str | None:
    return api_key or os.environ.get("ONEBOX_API_KEY") or None


def headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def seg(value: str) -> str:
    """One path segment: a run id, session id or file path never changes the route."""
    return quote(str(value), safe="")


def file_path(path: str) -> str:
    return "/".join(quote(part, safe="") for part in str(path).split("/"))


def submit_body(plan: Json | None, task: str | None, file_ids: list[str], *, name: str | None,
                profile: str | None, idempotency_key: str | None) -> Json:
    if (plan is None) == (task is None):
        raise ValidationError("give exactly one of plan= or task=", field="plan")
    body: Json = {"plan": plan} if plan is not None else {"task": task}
    optional = {"name": name, "profile": profile, "idempotency_key": idempotency_key}
    body.update({k: v for k, v in optional.items() if v is not None})
    if file_ids:
        body["files"] = file_ids
    return body


def upload_files(paths: list[str | Path]) -> list[tuple[str, tuple[str, bytes]]]:
    out = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise ValidationError(f"files: {path} is not a readable file", field="files")
        out.append(("files", (path.name, path.read_bytes())))
    return out


def execute_body(code: str, language: str, *, stateless: bool, timeout_s: float | None,
                 memory_mb: int | None, allow_domains: list[str] | None,
                 stdin: str | None) -> Json:
    body: Json = {"code": code, "language": language}
    optional = {"timeout_s": timeout_s, "memory_mb": memory_mb, "stdin": stdin}
    body.update({k: v for k, v in optional.items() if v is not None})
    if allow_domains:
        body["allow_domains"] = list(allow_domains)
    if stateless:
        body["stateless"] = True
    return body


class SseParser:
    """Server-sent events, line by line: yields an Event per blank-line-terminated block."""

    def __init__(self) -> None:
        self.last_id: int | None = None  # of the last event dispatched whole
        self._id: int | None = None
        self._type = "message"
        self._data: list[str] = []

    def reset(self) -> None:
        """A new connection: a block the old one cut short is dropped, not merged."""
        self._type, self._data, self._id = "message", [], None

    def feed(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and value.isdigit():
            self._id = int(value)
        return None

    def _dispatch(self) -> Event | None:
        kind, data, self._type, self._data = self._type, self._data, "message", []
        if self._id is not None:  # the id counts once its event is whole (a cut stream
            self.last_id, self._id = self._id, None  # resumes before a half-read event)
        if not data:
            return None
        parsed = json.loads("\n".join(data))
        seq = parsed.get("seq", self.last_id) if isinstance(parsed, dict) else self.last_id
        return Event(seq=int(seq or 0), type=kind, data=parsed if isinstance(parsed, dict) else {})


class NdjsonReader:
    """The execute stream: stdout/stderr/result lines to the callbacks, then the final result."""

    def __init__(self, on_stdout: Any, on_stderr: Any, on_result: Any) -> None:
        self.callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self.on_result = on_result
        self.result: ExecResult | None = None

    def feed(self, line: str) -> None:
        if not line.strip():
            return
        item = json.loads(line)
        kind = item.get("type")
        if kind in self.callbacks and self.callbacks[kind] is not None:
            self.callbacks[kind](str(item.get("text", "")))
        elif kind == "result" and self.on_result is not None:
            self.on_result(ExecResult.from_json({"results": [item]}).results[0])
        elif kind == "end":
            self.result = ExecResult.from_json(item.get("result") or {})

    def finish(self, url: str) -> ExecResult:
        if self.result is None:
            from onebox.client.errors import ApiError

            raise ApiError(f"the execute stream from {url} ended without its final result "
                           "line (the connection broke, or the server stopped)")
        return self.result


def replay_plain(result: ExecResult, on_stdout: Any, on_stderr: Any, on_result: Any) -> None:
    """A server that answered with plain JSON: the callbacks still see everything, once."""
    if on_stdout is not None and result.stdout:
        on_stdout(result.stdout)
    if on_stderr is not None and result.stderr:
        on_stderr(result.stderr)
    for output in result.results if on_result is not None else []:
        on_result(output)
