"""The chat model interface: frozen dataclasses in and out, no provider SDK type.

    model = chat_model_from_settings(settings.llm)          # onebox.llm.registry
    reply = await model.complete(ChatRequest(messages=(Message.user("hi"),)))
    reply.content, reply.tool_calls, reply.usage.prompt_tokens

A provider module (``llm/openai.py``) subclasses :class:`ChatModel` and
implements :meth:`ChatModel.complete`; it translates its SDK's errors into
:class:`~onebox.errors.ProviderError` and friends. Everything here is plain
data that serialises to JSON (``to_dict``/``from_dict``), so requests and
responses can be stored and replayed.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A function call the model asked for; ``arguments`` is the raw JSON text it wrote."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """The arguments as data; ValueError if the model wrote invalid JSON."""
        return json.loads(self.arguments or "{}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class Message:
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def system(cls, text: str) -> Message:
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str | None, tool_calls: Sequence[ToolCall] = ()) -> Message:
        return cls("assistant", text, tuple(tool_calls))

    @classmethod
    def tool(cls, tool_call_id: str, text: str) -> Message:
        return cls("tool", text, tool_call_id=tool_call_id)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        calls = tuple(ToolCall(**c) for c in data.get("tool_calls") or ())
        return cls(data["role"], data.get("content"), calls, data.get("tool_call_id"),
                   data.get("name"))


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: name, description and a JSON schema for its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": dict(self.parameters)}


@dataclass(frozen=True)
class ChatRequest:
    """One completion request. ``json_output`` asks for a single JSON object as the reply."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None  # "auto" | "none" | "required" | a tool name
    json_output: bool = False
    temperature: float | None = None
    max_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": [m.to_dict() for m in self.messages],
            "tools": [t.to_dict() for t in self.tools],
            "tool_choice": self.tool_choice,
            "json_output": self.json_output,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatRequest:
        return cls(
            messages=tuple(Message.from_dict(m) for m in data["messages"]),
            tools=tuple(ToolSpec(**t) for t in data.get("tools") or ()),
            tool_choice=data.get("tool_choice"),
            json_output=bool(data.get("json_output")),
            temperature=data.get("temperature"),
            max_tokens=data.get("max_tokens"),
        )


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ChatResponse:
    """The model's reply: one assistant message, token usage and how long the call took."""

    message: Message
    model: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    latency_ms: float = 0.0

    @property
    def content(self) -> str:
        return self.message.content or ""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.message.tool_calls

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message.to_dict(),
            "model": self.model,
            "usage": {"prompt_tokens": self.usage.prompt_tokens,
                      "completion_tokens": self.usage.completion_tokens},
            "finish_reason": self.finish_reason,
            "latency_ms": self.latency_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatResponse:
        usage = data.get("usage") or {}
        return cls(
            message=Message.from_dict(data["message"]),
            model=data.get("model", ""),
            usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
            finish_reason=data.get("finish_reason"),
            latency_ms=float(data.get("latency_ms", 0.0)),
        )


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens, prompt and completion."""

    input_per_mtok: float
    output_per_mtok: float

    def cost_usd(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.input_per_mtok
                + usage.completion_tokens * self.output_per_mtok) / 1_000_000


def cost_usd(model: str, usage: Usage, prices: Mapping[str, ModelPrice]) -> float | None:
    """The cost of one call from a price table keyed by model name; None if the model is not in it."""
    price = prices.get(model) or prices.get(model.split(":", 1)[-1])
    return None if price is None else price.cost_usd(usage)


@dataclass(frozen=True)
class EndpointHints:
    """How to fix a model endpoint that fails, in the words of whoever chose it: the process's
    own settings (the defaults) or an operator-declared provider a profile names."""

    endpoint: str = "check OPENAI_BASE_URL"  # it cannot be reached
    model: str = "check ONEBOX_LLM__MODEL and OPENAI_BASE_URL (it usually ends in /v1)"  # 404
    key: str = "set OPENAI_API_KEY to a valid key for this endpoint"  # 401, 403


class ChatModel(abc.ABC):
    """A chat-completion model. Implement :meth:`complete`; everything else is derived.

    ``hints`` says what to change when the endpoint fails; the code that chose the endpoint
    replaces it (a stored profile's provider is fixed with `onebox provider`, not with
    OPENAI_BASE_URL)."""

    provider: ClassVar[str] = "abstract"
    supports_tools: ClassVar[bool] = True
    supports_json_output: ClassVar[bool] = True

    def __init__(self, model: str) -> None:
        self.model = model
        self.hints = EndpointHints()

    @abc.abstractmethod
    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send one request; raise ProviderError (RateLimited, ProviderTimeout...) on failure."""

    async def aclose(self) -> None:
        """Release connections; the default has none."""
        return None

    async def chat(self, messages: Sequence[Message], **options: Any) -> ChatResponse:
        """Shorthand for :meth:`complete` with a list of messages and request options."""
        return await self.complete(ChatRequest(messages=tuple(messages), **options))

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"
