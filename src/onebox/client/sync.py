"""``Client``: the blocking SDK over onebox's HTTP API (httpx).

    from onebox import Client
    with Client() as ob:                      # ONEBOX_URL, ONEBOX_API_KEY
        run = ob.runs.wait(ob.runs.submit(plan={"steps": [...]}).run_id)
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from onebox.client import spec
from onebox.client.errors import from_response, unreachable
from onebox.client.spec import Call, seg
from onebox.client.types import (
    TERMINAL,
    CellOutput,
    Event,
    ExecResult,
    Json,
    Memory,
    Run,
    RunFile,
    SearchHit,
    SessionInfo,
    Snapshot,
    Submitted,
)
from onebox.errors import ProviderTimeout

TextCallback = Callable[[str], Any] | None
ResultCallback = Callable[[CellOutput], Any] | None


class Client:
    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout_s: float = 60.0) -> None:
        self.base_url = spec.resolve_url(base_url)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                  headers=spec.headers(spec.resolve_key(api_key)))
        self.runs = Runs(self)
        self.sessions = Sessions(self)
        self.snapshots = Snapshots(self)
        self.knowledge = Knowledge(self)
        self.memory = MemoryApi(self)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call) -> httpx.Response:
        try:
            response = self._http.request(call.method, call.path, json=call.json,
                                          params=call.params, headers=call.headers,
                                          files=call.files)
        except httpx.TransportError as exc:
            raise unreachable(self.base_url + call.path, exc) from exc
        return check(response)

    def json(self, call: Call) -> Any:
        return self.send(call).json()

    def stream(self, call: Call, timeout_s: float | None = None) -> Any:
        timeout = httpx.Timeout(self._http.timeout.connect, read=timeout_s) \
            if timeout_s is not None else httpx.USE_CLIENT_DEFAULT
        return self._http.stream(call.method, call.path, json=call.json, params=call.params,
                                 headers=call.headers, timeout=timeout)


def check(response: httpx.Response) -> httpx.Response:
    if response.status_code < 400:
        return response
    response.read()
    try:
        body = response.json()
    except ValueError:
        body = None
    raise from_response(response.status_code, body, str(response.request.url))


def _save(client: Client, call: Call, dest: str | Path) -> Path:
    target = Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with client.stream(call) as response:
            check(response)
            with target.open("wb") as out:
                for chunk in response.iter_bytes():
                    out.write(chunk)
    except httpx.TransportError as exc:
        raise unreachable(client.base_url + call.path, exc) from exc
    return target


class Runs:
    def __init__(self, client: Client) -> None:
        self._c = client

    def submit(self, plan: Json | str | None = None, task: str | None = None, *,
               files: list[str | Path] | None = None, name: str | None = None,
               profile: str | None = None, idempotency_key: str | None = None) -> Submitted:
        """Submit a plan (a dict, or YAML text) or a task in words, with input files."""
        if isinstance(plan, str):
            plan = self._c.json(Call("POST", "/v1/plans/parse", json={"text": plan}))["plan"]
        document: Json | None = plan  # type: ignore[assignment]
        ids = self.upload(files) if files else []
        body = spec.submit_body(document, task, ids, name=name, profile=profile,
                                idempotency_key=idempotency_key)
        data = self._c.json(Call("POST", "/v1/runs", json=body))
        return Submitted(str(data["run_id"]), data.get("trace_id"), bool(data.get("existing")))

    def upload(self, paths: list[str | Path]) -> builtins.list[str]:
        data = self._c.json(Call("POST", "/v1/uploads", files=spec.upload_files(paths)))
        return [str(u["id"]) for u in data["uploads"]]

    def get(self, run_id: str) -> Run:
        return Run.from_detail(self._c.json(Call("GET", f"/v1/runs/{seg(run_id)}")))

    def list(self, *, status: list[str] | None = None, q: str | None = None,
             limit: int = 50) -> builtins.list[Json]:
        params = {k: v for k, v in {"status": status, "q": q, "limit": limit}.items() if v}
        return list(self._c.json(Call("GET", "/v1/runs", params=params))["runs"])

    def wait(self, run_id: str, timeout_s: float = 300.0, *, poll_s: float = 0.2) -> Run:
        """The run once it is finished (SUCCEEDED, FAILED, CANCELLED or DEAD)."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.get(run_id)
            if run.done:
                return run
            if time.monotonic() >= deadline:
                raise ProviderTimeout(f"run {run_id} is still {run.status} after {timeout_s} s "
                                      "(runs.wait timeout_s)", field="timeout_s")
            time.sleep(min(poll_s, max(deadline - time.monotonic(), 0.0)))
            poll_s = min(poll_s * 1.5, 2.0)

    def answer(self, run_id: str) -> str | None:
        return self.get(run_id).answer

    def events(self, run_id: str, *, after: int = 0, until_done: bool = True,
               max_reconnects: int = 20) -> Iterator[Event]:
        """The run's events live over SSE (step_output live logs included). A dropped stream
        reconnects with Last-Event-ID: no gap, no duplicate. Ends after the run's final
        event when ``until_done``."""
        parser, failures = spec.SseParser(), 0
        parser.last_id = after
        while True:
            parser.reset()
            call = Call("GET", f"/v1/runs/{seg(run_id)}/events/stream",
                        headers={"Last-Event-ID": str(parser.last_id or 0)})
            try:
                with self._c.stream(call, timeout_s=None) as response:
                    check(response)
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        if event is None:
                            continue
                        failures = 0
                        yield event
                        if until_done and event.type in spec.TERMINAL_EVENTS:
                            return
            except (httpx.TransportError, httpx.StreamError) as exc:
                failures += 1
                if failures > max_reconnects:
                    raise unreachable(self._c.base_url + call.path, exc) from exc
                time.sleep(min(0.2 * failures, 2.0))

    def _action(self, run_id: str, action: str, body: Json | None = None) -> Json:
        return dict(self._c.json(Call("POST", f"/v1/runs/{seg(run_id)}/{action}", json=body)))

    def cancel(self, run_id: str) -> Json:
        return self._action(run_id, "cancel")

    def retry(self, run_id: str) -> Json:
        return self._action(run_id, "retry")

    def replay(self, run_id: str, timeout_s: float = 600.0) -> Json:
        """Re-run every code step of a finished run from its own inputs (a replay run the
        server's workers execute); per-step matches and the first difference, once the
        replay run has ended (up to ``timeout_s``)."""
        report = dict(self._c.json(Call(
            "POST", f"/v1/runs/{seg(run_id)}/replay", params={"wait_s": spec.REPLAY_WAIT_S})))
        if report["status"] in TERMINAL:
            return report
        self.wait(report["replay_run_id"], timeout_s)
        return dict(self._c.json(Call(
            "GET", f"/v1/runs/{seg(report['replay_run_id'])}/replay-report")))

    def compare(self, run_a: str, run_b: str) -> Json:
        """Two runs step by step (``onebox diff``)."""
        return dict(self._c.json(Call("GET", f"/v1/runs/{seg(run_a)}/compare/{seg(run_b)}")))

    def fork(self, run_id: str, at: str, *, set: Json | None = None,  # noqa: A002
             plan: Json | None = None, profile: str | None = None) -> Json:
        """Fork a finished run at step ``at`` (the steps before it are kept, the workspace is
        as it was before it) with ``set`` ({"s3.code": "echo hi"}) or another ``plan``, or,
        for a task run, another ``profile`` whose model is asked from ``at`` on; returns the
        new run's id and which steps were kept and which run again."""
        return self._action(run_id, "fork", {"at": at, "set": set or {}, "plan": plan,
                                             "profile": profile})

    def approve(self, run_id: str, step_id: str, comment: str | None = None) -> Json:
        return self._action(run_id, f"steps/{seg(step_id)}/approve", {"comment": comment})

    def reject(self, run_id: str, step_id: str, comment: str | None = None) -> Json:
        return self._action(run_id, f"steps/{seg(step_id)}/reject", {"comment": comment})

    def files(self, run_id: str) -> builtins.list[RunFile]:
        """The files the run kept (its artifacts manifest)."""
        data = self._c.json(Call("GET", f"/v1/runs/{seg(run_id)}/artifacts"))
        return [RunFile.from_json(f) for f in data["files"]]

    def read(self, run_id: str, path: str) -> bytes:
        call = Call("GET", f"/v1/runs/{seg(run_id)}/artifacts/{spec.file_path(path)}")
        return self._c.send(call).content

    def download(self, run_id: str, path: str, dest: str | Path) -> Path:
        call = Call("GET", f"/v1/runs/{seg(run_id)}/artifacts/{spec.file_path(path)}")
        return _save(self._c, call, dest)

    def zip(self, run_id: str, dest: str | Path) -> Path:
        call = Call("GET", f"/v1/runs/{seg(run_id)}/artifacts", params={"zip": "true"})
        return _save(self._c, call, dest)


class Session:
    """One sandbox session: exec keeps interpreter state between calls; files persist."""

    def __init__(self, client: Client, info: SessionInfo) -> None:
        self._c = client
        self.id = info.id
        self.info = info
        self._base = f"/v1/sessions/{seg(info.id)}"

    def exec(self, code: str, language: str = "python", *, stateless: bool = False,
             timeout_s: float | None = None, memory_mb: int | None = None,
             allow_domains: list[str] | None = None, stdin: str | None = None,
             on_stdout: TextCallback = None, on_stderr: TextCallback = None,
             on_result: ResultCallback = None) -> ExecResult:
        body = spec.execute_body(code, language, stateless=stateless, timeout_s=timeout_s,
                                 memory_mb=memory_mb, allow_domains=allow_domains, stdin=stdin)
        call = Call("POST", f"{self._base}/execute", json=body, headers={"Accept": spec.NDJSON})
        try:
            with self._c.stream(call, timeout_s=None) as response:
                check(response)
                return _read_exec(response, call, self._c.base_url,
                                  (on_stdout, on_stderr, on_result))
        except httpx.TransportError as exc:
            raise unreachable(self._c.base_url + call.path, exc) from exc

    def upload(self, path: str, data: bytes | str) -> Json:
        raw = data.encode() if isinstance(data, str) else data
        call = Call("POST", f"{self._base}/files", files=[("file", (Path(path).name, raw)),
                                                          ("path", (None, path.encode()))])
        return dict(self._c.json(call))

    def files(self) -> builtins.list[Json]:
        return list(self._c.json(Call("GET", f"{self._base}/files"))["files"])

    def read(self, path: str) -> bytes:
        return self._c.send(Call("GET", f"{self._base}/files/{spec.file_path(path)}")).content

    def download(self, path: str, dest: str | Path) -> Path:
        return _save(self._c, Call("GET", f"{self._base}/files/{spec.file_path(path)}"), dest)

    def snapshots(self) -> builtins.list[Snapshot]:
        return self._c.snapshots.list(session_id=self.id)

    def delete(self) -> None:
        self._c.send(Call("DELETE", self._base))


def _read_exec(response: httpx.Response, call: Call, base_url: str,
               callbacks: tuple[TextCallback, TextCallback, ResultCallback]) -> ExecResult:
    if not response.headers.get("content-type", "").startswith(spec.NDJSON):
        response.read()
        result = ExecResult.from_json(response.json())
        spec.replay_plain(result, *callbacks)
        return result
    reader = spec.NdjsonReader(*callbacks)
    for line in response.iter_lines():
        reader.feed(line)
    return reader.finish(base_url + call.path)


class Sessions:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, environment: str | None = None) -> Session:
        body = {"environment": environment} if environment else None
        data = self._c.json(Call("POST", "/v1/sessions", json=body))
        return Session(self._c, SessionInfo(str(data["id"]), data))

    def get(self, session_id: str) -> Session:
        """A handle on an existing session (no request: the first call checks it)."""
        return Session(self._c, SessionInfo(session_id))

    def list(self) -> builtins.list[SessionInfo]:
        data = self._c.json(Call("GET", "/v1/sessions"))
        return [SessionInfo(str(s["id"]), s) for s in data["sessions"]]


class Snapshots:
    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self, *, session_id: str | None = None, run_id: str | None = None,
             limit: int = 50) -> builtins.list[Snapshot]:
        params = {k: v for k, v in {"session_id": session_id, "run_id": run_id,
                                    "limit": limit}.items() if v}
        data = self._c.json(Call("GET", "/v1/snapshots", params=params))
        return [Snapshot.from_json(s) for s in data["snapshots"]]

    def download(self, snapshot_id: str, dest: str | Path) -> Path:
        return _save(self._c, Call("GET", f"/v1/snapshots/{seg(snapshot_id)}/download"), dest)

    def restore(self, snapshot_id: str) -> Session:
        data = self._c.json(Call("POST", f"/v1/snapshots/{seg(snapshot_id)}/restore"))
        session = data["session"]
        return Session(self._c, SessionInfo(str(session["id"]), data))


class Knowledge:
    def __init__(self, client: Client) -> None:
        self._c = client

    def add(self, source: str, text: str, *, collection: str = "default",
            title: str | None = None, metadata: Json | None = None) -> Json:
        body = {"source": source, "text": text, "collection": collection, "title": title,
                "metadata": metadata or {}}
        return dict(self._c.json(Call("POST", "/v1/knowledge/documents", json=body)))

    def search(self, query: str, *, k: int = 5,
               collections: list[str] | None = None) -> builtins.list[SearchHit]:
        body = {"query": query, "k": k, "collections": collections}
        data = self._c.json(Call("POST", "/v1/knowledge/search", json=body))
        return [SearchHit.from_json(h) for h in data["hits"]]

    def documents(self, collection: str | None = None) -> Json:
        params = {"collection": collection} if collection else None
        return dict(self._c.json(Call("GET", "/v1/knowledge/documents", params=params)))


class MemoryApi:
    def __init__(self, client: Client) -> None:
        self._c = client

    def remember(self, scope: str, content: str, *, user_id: str = "",
                 kind: str = "short") -> Memory:
        body = {"scope": scope, "content": content, "user_id": user_id, "kind": kind}
        return Memory.from_json(self._c.json(Call("POST", "/v1/memory", json=body)))

    def recall(self, scope: str, query: str, *, k: int = 5, user_id: str = "") -> builtins.list[Memory]:
        body = {"scope": scope, "query": query, "k": k, "user_id": user_id}
        data = self._c.json(Call("POST", "/v1/memory/recall", json=body))
        return [Memory.from_json({**m, "scope": scope}) for m in data["memories"]]

    def forget(self, memory_id: str) -> None:
        self._c.send(Call("DELETE", f"/v1/memory/{seg(memory_id)}"))


__all__ = ["Client", "Session"]
