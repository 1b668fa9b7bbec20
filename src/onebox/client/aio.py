"""``AsyncClient``: the SDK for asyncio code; the same calls as ``Client``, awaited.

    async with AsyncClient() as ob:
        run = await ob.runs.wait((await ob.runs.submit(task="...")).run_id)
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Callable
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


class AsyncClient:
    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout_s: float = 60.0) -> None:
        self.base_url = spec.resolve_url(base_url)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s,
                                  headers=spec.headers(spec.resolve_key(api_key)))
        self.runs = Runs(self)
        self.sessions = Sessions(self)
        self.snapshots = Snapshots(self)
        self.knowledge = Knowledge(self)
        self.memory = MemoryApi(self)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call) -> httpx.Response:
        try:
            response = await self._http.request(call.method, call.path, json=call.json,
                                          params=call.params, headers=call.headers,
                                          files=call.files)
        except httpx.TransportError as exc:
            raise unreachable(self.base_url + call.path, exc) from exc
        return await check(response)

    async def json(self, call: Call) -> Any:
        return (await self.send(call)).json()

    def stream(self, call: Call, timeout_s: float | None = None) -> Any:
        timeout = httpx.Timeout(self._http.timeout.connect, read=timeout_s) \
            if timeout_s is not None else httpx.USE_CLIENT_DEFAULT
        return self._http.stream(call.method, call.path, json=call.json, params=call.params,
                                 headers=call.headers, timeout=timeout)


async def check(response: httpx.Response) -> httpx.Response:
    if response.status_code < 400:
        return response
    await response.aread()
    try:
        body = response.json()
    except ValueError:
        body = None
    raise from_response(response.status_code, body, str(response.request.url))


async def _save(client: AsyncClient, call: Call, dest: str | Path) -> Path:
    target = Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        async with client.stream(call) as response:
            await check(response)
            with target.open("wb") as out:
                async for chunk in response.aiter_bytes():
                    out.write(chunk)
    except httpx.TransportError as exc:
        raise unreachable(client.base_url + call.path, exc) from exc
    return target


class Runs:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def submit(self, plan: Json | str | None = None, task: str | None = None, *,
               files: list[str | Path] | None = None, name: str | None = None,
               profile: str | None = None, idempotency_key: str | None = None) -> Submitted:
        """Submit a plan (a dict, or YAML text) or a task in words, with input files."""
        if isinstance(plan, str):
            plan = (await self._c.json(Call("POST", "/v1/plans/parse",
                                               json={"text": plan})))["plan"]
        document: Json | None = plan  # type: ignore[assignment]
        ids = await self.upload(files) if files else []
        body = spec.submit_body(document, task, ids, name=name, profile=profile,
                                idempotency_key=idempotency_key)
        data = await self._c.json(Call("POST", "/v1/runs", json=body))
        return Submitted(str(data["run_id"]), data.get("trace_id"), bool(data.get("existing")))

    async def upload(self, paths: list[str | Path]) -> builtins.list[str]:
        data = await self._c.json(Call("POST", "/v1/uploads", files=spec.upload_files(paths)))
        return [str(u["id"]) for u in data["uploads"]]

    async def get(self, run_id: str) -> Run:
        return Run.from_detail(await self._c.json(Call("GET", f"/v1/runs/{seg(run_id)}")))

    async def list(self, *, status: list[str] | None = None, q: str | None = None,
             limit: int = 50) -> builtins.list[Json]:
        params = {k: v for k, v in {"status": status, "q": q, "limit": limit}.items() if v}
        return list((await self._c.json(Call("GET", "/v1/runs", params=params)))["runs"])

    async def wait(self, run_id: str, timeout_s: float = 300.0, *, poll_s: float = 0.2) -> Run:
        """The run once it is finished (SUCCEEDED, FAILED, CANCELLED or DEAD)."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = await self.get(run_id)
            if run.done:
                return run
            if time.monotonic() >= deadline:
                raise ProviderTimeout(f"run {run_id} is still {run.status} after {timeout_s} s "
                                      "(runs.wait timeout_s)", field="timeout_s")
            await asyncio.sleep(min(poll_s, max(deadline - time.monotonic(), 0.0)))
            poll_s = min(poll_s * 1.5, 2.0)

    async def answer(self, run_id: str) -> str | None:
        return (await self.get(run_id)).answer

    async def events(self, run_id: str, *, after: int = 0, until_done: bool = True,
               max_reconnects: int = 20) -> AsyncIterator[Event]:
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
                async with self._c.stream(call, timeout_s=None) as response:
                    await check(response)
                    async for line in response.aiter_lines():
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
                await asyncio.sleep(min(0.2 * failures, 2.0))

    async def _action(self, run_id: str, action: str, body: Json | None = None) -> Json:
        return dict(await self._c.json(Call("POST", f"/v1/runs/{seg(run_id)}/{action}", json=body)))

    async def cancel(self, run_id: str) -> Json:
        return await self._action(run_id, "cancel")

    async def retry(self, run_id: str) -> Json:
        return await self._action(run_id, "retry")

    async def replay(self, run_id: str, timeout_s: float = 600.0) -> Json:
        """:meth:`onebox.client.Client.replay`, awaited."""
        report = dict(await self._c.json(Call(
            "POST", f"/v1/runs/{seg(run_id)}/replay", params={"wait_s": spec.REPLAY_WAIT_S})))
        if report["status"] in TERMINAL:
            return report
        await self.wait(report["replay_run_id"], timeout_s)
        return dict(await self._c.json(Call(
            "GET", f"/v1/runs/{seg(report['replay_run_id'])}/replay-report")))

    async def compare(self, run_a: str, run_b: str) -> Json:
        """Two runs step by step (``onebox diff``)."""
        return dict(await self._c.json(Call("GET",
                                            f"/v1/runs/{seg(run_a)}/compare/{seg(run_b)}")))

    async def fork(self, run_id: str, at: str, *, set: Json | None = None,  # noqa: A002
                   plan: Json | None = None, profile: str | None = None) -> Json:
        """:meth:`onebox.client.Client.fork`, awaited."""
        return await self._action(run_id, "fork", {"at": at, "set": set or {}, "plan": plan,
                                                   "profile": profile})

    async def approve(self, run_id: str, step_id: str, comment: str | None = None) -> Json:
        return await self._action(run_id, f"steps/{seg(step_id)}/approve", {"comment": comment})

    async def reject(self, run_id: str, step_id: str, comment: str | None = None) -> Json:
        return await self._action(run_id, f"steps/{seg(step_id)}/reject", {"comment": comment})

    async def files(self, run_id: str) -> builtins.list[RunFile]:
        """The files the run kept (its artifacts manifest)."""
        data = await self._c.json(Call("GET", f"/v1/runs/{seg(run_id)}/artifacts"))
        return [RunFile.from_json(f) for f in data["files"]]

    async def read(self, run_id: str, path: str) -> bytes:
        call = Call("GET", f"/v1/runs/{seg(run_id)}/artifacts/{spec.file_path(path)}")
        return (await self._c.send(call)).content

    async def download(self, run_id: str, path: str, dest: str | Path) -> Path:
        call = Call("GET", f"/v1/runs/{seg(run_id)}/artifacts/{spec.file_path(path)}")
        return await _save(self._c, call, dest)

    async def zip(self, run_id: str, dest: str | Path) -> Path:
        call = Call("GET", f"/v1/runs/{seg(run_id)}/artifacts", params={"zip": "true"})
        return await _save(self._c, call, dest)


class AsyncSession:
    """One sandbox session: exec keeps interpreter state between calls; files persist."""

    def __init__(self, client: AsyncClient, info: SessionInfo) -> None:
        self._c = client
        self.id = info.id
        self.info = info
        self._base = f"/v1/sessions/{seg(info.id)}"

    async def exec(self, code: str, language: str = "python", *, stateless: bool = False,
             timeout_s: float | None = None, memory_mb: int | None = None,
             allow_domains: list[str] | None = None, stdin: str | None = None,
             on_stdout: TextCallback = None, on_stderr: TextCallback = None,
             on_result: ResultCallback = None) -> ExecResult:
        body = spec.execute_body(code, language, stateless=stateless, timeout_s=timeout_s,
                                 memory_mb=memory_mb, allow_domains=allow_domains, stdin=stdin)
        call = Call("POST", f"{self._base}/execute", json=body, headers={"Accept": spec.NDJSON})
        try:
            async with self._c.stream(call, timeout_s=None) as response:
                await check(response)
                return await _read_exec(response, call, self._c.base_url,
                                  (on_stdout, on_stderr, on_result))
        except httpx.TransportError as exc:
            raise unreachable(self._c.base_url + call.path, exc) from exc

    async def upload(self, path: str, data: bytes | str) -> Json:
        raw = data.encode() if isinstance(data, str) else data
        call = Call("POST", f"{self._base}/files", files=[("file", (Path(path).name, raw)),
                                                          ("path", (None, path.encode()))])
        return dict(await self._c.json(call))

    async def files(self) -> builtins.list[Json]:
        return list((await self._c.json(Call("GET", f"{self._base}/files")))["files"])

    async def read(self, path: str) -> bytes:
        call = Call("GET", f"{self._base}/files/{spec.file_path(path)}")
        return (await self._c.send(call)).content

    async def download(self, path: str, dest: str | Path) -> Path:
        return await _save(self._c, Call("GET", f"{self._base}/files/{spec.file_path(path)}"), dest)

    async def snapshots(self) -> builtins.list[Snapshot]:
        return await self._c.snapshots.list(session_id=self.id)

    async def delete(self) -> None:
        await self._c.send(Call("DELETE", self._base))


async def _read_exec(response: httpx.Response, call: Call, base_url: str,
               callbacks: tuple[TextCallback, TextCallback, ResultCallback]) -> ExecResult:
    if not response.headers.get("content-type", "").startswith(spec.NDJSON):
        await response.aread()
        result = ExecResult.from_json(response.json())
        spec.replay_plain(result, *callbacks)
        return result
    reader = spec.NdjsonReader(*callbacks)
    async for line in response.aiter_lines():
        reader.feed(line)
    return reader.finish(base_url + call.path)


class Sessions:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(self, environment: str | None = None) -> AsyncSession:
        body = {"environment": environment} if environment else None
        data = await self._c.json(Call("POST", "/v1/sessions", json=body))
        return AsyncSession(self._c, SessionInfo(str(data["id"]), data))

    async def get(self, session_id: str) -> AsyncSession:
        """A handle on an existing session (no request: the first call checks it)."""
        return AsyncSession(self._c, SessionInfo(session_id))

    async def list(self) -> builtins.list[SessionInfo]:
        data = await self._c.json(Call("GET", "/v1/sessions"))
        return [SessionInfo(str(s["id"]), s) for s in data["sessions"]]


class Snapshots:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def list(self, *, session_id: str | None = None, run_id: str | None = None,
             limit: int = 50) -> builtins.list[Snapshot]:
        params = {k: v for k, v in {"session_id": session_id, "run_id": run_id,
                                    "limit": limit}.items() if v}
        data = await self._c.json(Call("GET", "/v1/snapshots", params=params))
        return [Snapshot.from_json(s) for s in data["snapshots"]]

    async def download(self, snapshot_id: str, dest: str | Path) -> Path:
        return await _save(self._c, Call("GET", f"/v1/snapshots/{seg(snapshot_id)}/download"), dest)

    async def restore(self, snapshot_id: str) -> AsyncSession:
        data = await self._c.json(Call("POST", f"/v1/snapshots/{seg(snapshot_id)}/restore"))
        session = data["session"]
        return AsyncSession(self._c, SessionInfo(str(session["id"]), data))


class Knowledge:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def add(self, source: str, text: str, *, collection: str = "default",
            title: str | None = None, metadata: Json | None = None) -> Json:
        body = {"source": source, "text": text, "collection": collection, "title": title,
                "metadata": metadata or {}}
        return dict(await self._c.json(Call("POST", "/v1/knowledge/documents", json=body)))

    async def search(self, query: str, *, k: int = 5,
               collections: list[str] | None = None) -> builtins.list[SearchHit]:
        body = {"query": query, "k": k, "collections": collections}
        data = await self._c.json(Call("POST", "/v1/knowledge/search", json=body))
        return [SearchHit.from_json(h) for h in data["hits"]]

    async def documents(self, collection: str | None = None) -> Json:
        params = {"collection": collection} if collection else None
        return dict(await self._c.json(Call("GET", "/v1/knowledge/documents", params=params)))


class MemoryApi:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def remember(self, scope: str, content: str, *, user_id: str = "",
                 kind: str = "short") -> Memory:
        body = {"scope": scope, "content": content, "user_id": user_id, "kind": kind}
        return Memory.from_json(await self._c.json(Call("POST", "/v1/memory", json=body)))

    async def recall(self, scope: str, query: str, *, k: int = 5, user_id: str = "") -> builtins.list[Memory]:
        body = {"scope": scope, "query": query, "k": k, "user_id": user_id}
        data = await self._c.json(Call("POST", "/v1/memory/recall", json=body))
        return [Memory.from_json({**m, "scope": scope}) for m in data["memories"]]

    async def forget(self, memory_id: str) -> None:
        await self._c.send(Call("DELETE", f"/v1/memory/{seg(memory_id)}"))


__all__ = ["AsyncClient", "AsyncSession"]
