"""Public fakes for testing code built on onebox (and onebox itself).

Models
    :class:`ScriptedModel`         an in-process ChatModel answering from a script
    :class:`ScriptedOpenAIServer`  a real OpenAI-compatible HTTP server on 127.0.0.1
                                   answering from a script (status codes, Retry-After,
                                   tool calls, JSON), for the real ``openai`` client path
Agent
    :func:`run_agent_offline`      drives an :class:`~onebox.agent.loop.Agent` in memory:
                                   model calls go to a ChatModel, steps to a function

Fakes live here and nowhere else in onebox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeVar

from onebox.agent.actions import (
    Action,
    AskApproval,
    CallModel,
    CheckCode,
    CheckResult,
    Decision,
    ExecuteStep,
    Finish,
    LookupTools,
    ModelReply,
    Observation,
    ReadDocument,
    Recall,
    Remember,
    SearchKnowledge,
    StepAction,
    StepResult,
    ToolHint,
    ToolsResult,
)
from onebox.agent.loop import Agent
from onebox.llm.base import ChatModel, ChatRequest, ChatResponse, Message, ToolCall, Usage

__all__ = [
    "InMemoryMemory", "OfflineRun", "ScriptExhausted", "ScriptedModel", "ScriptedOpenAIServer",
    "ServerReply", "run_agent_offline", "step_failed", "step_ok", "syntax_check",
    "tool_call_reply",
    # re-exported for convenience in tests written against the offline driver
    "ModelReply", "StepResult", "ToolsResult",
]

# --------------------------------------------------------------------------- ScriptedModel

ScriptItem = Any  # str | Mapping | ChatResponse | Message | BaseException | Callable[[ChatRequest], ...]


class ScriptExhausted(AssertionError):
    """The scripted model was asked more often than its script allows."""


class ScriptedModel(ChatModel):
    """Answers each request with the next script item and records every request.

    Items: a ``str`` (the reply text), a mapping (replied as JSON text), a
    :class:`Message` or :class:`ChatResponse`, an exception (raised), or a
    callable taking the :class:`ChatRequest` and returning one of these.
    """

    provider = "scripted"

    def __init__(self, script: Iterable[ScriptItem] = (), *, model: str = "scripted",
                 usage: Usage | None = None) -> None:
        super().__init__(model)
        self.script: list[ScriptItem] = list(script)
        self.requests: list[ChatRequest] = []
        self.usage = usage or Usage(10, 5)

    def add(self, *items: ScriptItem) -> None:
        self.script.extend(items)

    @property
    def remaining(self) -> int:
        return len(self.script)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if not self.script:
            last = request.messages[-1].content if request.messages else ""
            raise ScriptExhausted(
                f"ScriptedModel got request #{len(self.requests)} but the script is empty; "
                f"last message: {(last or '')[:300]!r}"
            )
        item = self.script.pop(0)
        if callable(item) and not isinstance(item, BaseException | type):
            item = item(request)
        return self._response(item)

    def _response(self, item: ScriptItem) -> ChatResponse:
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ChatResponse):
            return item
        if isinstance(item, Message):
            return ChatResponse(item, self.model, self.usage, "stop")
        if isinstance(item, str):
            return ChatResponse(Message.assistant(item), self.model, self.usage, "stop")
        if isinstance(item, Mapping | list):
            text = json.dumps(item)
            return ChatResponse(Message.assistant(text), self.model, self.usage, "stop")
        raise TypeError(f"ScriptedModel cannot reply with {type(item).__name__}")


def tool_call_reply(name: str, arguments: Mapping[str, Any], call_id: str = "call_1") -> Message:
    """A script item: the model calls tool ``name`` with ``arguments``."""
    return Message.assistant(None, [ToolCall(call_id, name, json.dumps(arguments))])


# --------------------------------------------------------------------------- HTTP server


@dataclass(frozen=True)
class ServerReply:
    """One scripted HTTP answer of :class:`ScriptedOpenAIServer`."""

    status: int = 200
    body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait this long before answering (to exercise client timeouts)

    @classmethod
    def text(cls, content: str, *, prompt_tokens: int = 12, completion_tokens: int = 7,
             model: str = "scripted") -> ServerReply:
        return cls(200, _completion({"role": "assistant", "content": content}, "stop", model,
                                    prompt_tokens, completion_tokens))

    @classmethod
    def json(cls, data: Any, **kwargs: Any) -> ServerReply:
        return cls.text(json.dumps(data), **kwargs)

    @classmethod
    def tool_call(cls, name: str, arguments: Mapping[str, Any], *, call_id: str = "call_1",
                  model: str = "scripted") -> ServerReply:
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return cls(200, _completion(message, "tool_calls", model, 20, 9))

    @classmethod
    def error(cls, status: int, *, retry_after: float | str | None = None,
              message: str = "scripted error") -> ServerReply:
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        body = {"error": {"message": message, "type": "scripted", "code": str(status)}}
        return cls(status, body, headers)


def _completion(message: Mapping[str, Any], finish: str, model: str, prompt_tokens: int,
                completion_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": dict(message), "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class ScriptedOpenAIServer:
    """An OpenAI-compatible ``POST /v1/chat/completions`` on 127.0.0.1 answering from a script.

        with ScriptedOpenAIServer([ServerReply.error(429, retry_after=0),
                                   ServerReply.text("hi")]) as server:
            model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")

    ``requests`` holds the JSON body of every request received, in order.
    """

    def __init__(self, script: Iterable[ServerReply] = ()) -> None:
        self.script: list[ServerReply] = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add(self, *replies: ServerReply) -> None:
        with self._lock:
            self.script.extend(replies)

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAIServer is not started; use it as a context manager")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> ScriptedOpenAIServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> ServerReply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if not self.script:
                return ServerReply(500, {"error": {"message": "script exhausted"}})
            return self.script.pop(0)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(ServerReply(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                body = json.loads(raw or b"{}")
                self._send(server._next(body, {k.lower(): v for k, v in self.headers.items()}))

            def _send(self, reply: ServerReply) -> None:
                if reply.delay_s:
                    server._stop.wait(reply.delay_s)
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


# --------------------------------------------------------------------------- offline driver

T = TypeVar("T")
Executor = Callable[[ExecuteStep], "StepResult | Awaitable[StepResult]"]


def step_ok(stdout: str = "", result: Any = None, **fields: Any) -> StepResult:
    """A successful step attempt, for executor functions (the driver fills in action_id)."""
    return StepResult("", ok=True, exit_code=0, stdout=stdout, result=result, **fields)


def step_failed(stderr: str = "error", exit_code: int | None = 1, **fields: Any) -> StepResult:
    return StepResult("", ok=False, exit_code=exit_code, stderr=stderr, **fields)


@dataclass
class OfflineRun:
    """Everything that happened in one :func:`run_agent_offline` call, in order."""

    agent: Agent
    actions: list[Action] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    batches: list[list[Action]] = field(default_factory=list)

    @property
    def result(self) -> Finish:
        assert self.agent.result is not None, "the agent has not finished"
        return self.agent.result

    def of_type(self, cls: type[T]) -> list[T]:
        return [a for a in self.actions if isinstance(a, cls)]

    def decisions(self, step_id: str | None = None) -> list[Decision]:
        return [d for d in self.agent.decisions
                if step_id is None or d.step_id == step_id or
                (d.step_id or "").startswith(f"{step_id}[")]

    def executed(self) -> list[str]:
        """Instance keys of every ExecuteStep, in order (one per attempt)."""
        return [a.instance for a in self.of_type(ExecuteStep)]


class InMemoryMemory:
    """The default memory of the offline driver: remembered texts, recalled by shared words."""

    def __init__(self) -> None:
        self.items: list[tuple[str | None, str]] = []

    def remember(self, action: Remember) -> StepResult:
        self.items.append((action.scope, action.text))
        return step_ok(result={"remembered": action.text})

    def recall(self, action: Recall) -> StepResult:
        words = set(action.query.lower().split())
        hits = [text for scope, text in self.items
                if scope == action.scope and words & set(text.lower().split())]
        return step_ok(result=hits[: action.top_k])


async def syntax_check(action: CheckCode) -> CheckResult:
    """``bash -n`` / ``node --check`` on the code in a temporary file (host tools, no sandbox)."""
    suffix = ".sh" if action.language == "bash" else ".js"
    fd, path = tempfile.mkstemp(suffix=suffix, prefix="onebox-check-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(action.code)
        proc = await asyncio.create_subprocess_exec(
            *action.argv(path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        return CheckResult(action.id, proc.returncode == 0, err.decode(errors="replace").strip())
    finally:
        os.unlink(path)


async def _maybe_await(value: T | Awaitable[T]) -> T:
    if inspect.isawaitable(value):
        return await value
    return value


async def run_agent_offline(
    agent: Agent,
    model: ChatModel | None = None,
    executor: Executor | None = None,
    *,
    tools: Sequence[ToolHint] = (),
    knowledge: Callable[[SearchKnowledge], Any] | None = None,
    documents: Callable[[ReadDocument], Any] | None = None,
    memory: InMemoryMemory | None = None,
    approve: Callable[[AskApproval], bool] | None = None,
    check: Callable[[CheckCode], Awaitable[CheckResult]] = syntax_check,
    call: Callable[[CallModel], Awaitable[ModelReply]] | None = None,
    max_actions: int = 10_000,
) -> OfflineRun:
    """Drive ``agent`` to its Finish in memory: a batch of actions at a time, performed
    concurrently, their observations fed back in action order (so runs are deterministic).

    ``executor`` runs ExecuteStep actions (return :func:`step_ok`/:func:`step_failed`);
    ``knowledge`` returns the hits for a search; ``documents`` the result of a knowledge_read
    (``{"text": ..., "document_id": ...}``); ``approve`` answers approvals (default yes);
    ``call`` performs model calls instead of ``model`` (e.g. to record them in the database).
    """
    run = OfflineRun(agent)
    memory = memory or InMemoryMemory()

    async def perform(action: Action) -> Observation | None:
        if isinstance(action, CallModel) and call is not None:
            return await call(action)
        if isinstance(action, CallModel):
            if model is None:
                raise AssertionError(f"{action.id} calls the model but no model was given")
            return ModelReply(action.id, await model.complete(action.request))
        if isinstance(action, CheckCode):
            return await check(action)
        if isinstance(action, LookupTools):
            return ToolsResult(action.id, tuple(tools))
        if isinstance(action, StepAction):
            result = await _perform_step(action)
            return dataclasses.replace(result, action_id=action.id)
        return None

    async def _perform_step(action: StepAction) -> StepResult:
        if isinstance(action, ExecuteStep):
            if executor is None:
                raise AssertionError(f"{action.id} executes a step but no executor was given")
            return await _maybe_await(executor(action))
        if isinstance(action, SearchKnowledge):
            hits = await _maybe_await(knowledge(action)) if knowledge else []
            return step_ok(result=hits)
        if isinstance(action, ReadDocument):
            if documents is None:
                raise AssertionError(f"{action.id} reads a document but no documents were given")
            return step_ok(result=await _maybe_await(documents(action)))
        if isinstance(action, Remember):
            return memory.remember(action)
        if isinstance(action, Recall):
            return memory.recall(action)
        if isinstance(action, AskApproval):
            approved = approve(action) if approve else True
            return step_ok(result={"approved": True}) if approved \
                else step_failed("refused by the approver", exit_code=None)
        raise AssertionError(f"the offline driver cannot perform {action.type}")

    pending = agent.start()
    while pending:
        if len(run.actions) + len(pending) > max_actions:
            raise AssertionError(f"more than {max_actions} actions; is the agent looping?")
        run.actions.extend(pending)
        run.batches.append(pending)
        observations = await asyncio.gather(*(perform(a) for a in pending))
        pending = []
        for obs in observations:
            if obs is not None:
                run.observations.append(obs)
                pending.extend(agent.observe(obs))
    if not agent.finished:
        waiting = ", ".join(a.id for a in agent.outstanding())
        raise AssertionError(f"the agent stopped without finishing; waiting for: {waiting}")
    return run
