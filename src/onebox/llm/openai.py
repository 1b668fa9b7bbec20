"""Any OpenAI-compatible chat endpoint (OpenAI, Kimi, DeepSeek, vLLM, Ollama, llama.cpp).

Uses the official ``openai`` package with its own retries switched off: this
module retries 408/409/429/5xx, timeouts and connection failures itself with
exponential backoff and jitter, honouring ``Retry-After``. Errors are mapped by
exception type and HTTP status (never by message text), keeping the cause:

    429            -> RateLimited          (after the retries are used up)
    timeout        -> ProviderTimeout
    401, 403, 404  -> ConfigError          (wrong key, base URL or model name)
    anything else  -> ProviderError

An endpoint that answers HTTP 400 to JSON mode or ``temperature`` (some local
servers and reasoning models) is asked again once without them, and they are not
sent to it again; prompts ask for JSON anyway.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai

from onebox.errors import ConfigError, OneboxError, ProviderError, ProviderTimeout, RateLimited
from onebox.llm.base import ChatModel, ChatRequest, ChatResponse, Message, ToolCall, Usage

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
OPTIONAL_PARAMETERS = ("response_format", "temperature")
MAX_RETRY_AFTER_S = 120.0


class OpenAIChatModel(ChatModel):
    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(model)
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._sleep = sleep
        self.send_optional = True  # JSON mode and temperature, until the endpoint refuses them
        self._rng = rng or random.Random()
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "not-needed", base_url=base_url, timeout=timeout_s, max_retries=0
        )

    async def complete(self, request: ChatRequest) -> ChatResponse:
        kwargs = self._kwargs(request)
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                completion = await self._client.chat.completions.create(**kwargs)
            except openai.OpenAIError as exc:
                if self._drop_optional(exc, kwargs):
                    continue
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    raise self._translate(exc) from exc
                log.info("model %s: %s, retry %d in %.2fs", self.model, type(exc).__name__,
                         attempt + 1, delay)
                attempt += 1
                await self._sleep(delay)
                continue
            latency_ms = (time.perf_counter() - started) * 1000
            return _to_response(completion, self.model, latency_ms)

    async def aclose(self) -> None:
        await self._client.close()

    def _kwargs(self, request: ChatRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [_message_to_openai(m) for m in request.messages],
        }
        if request.tools:
            kwargs["tools"] = [{"type": "function", "function": t.to_dict()} for t in request.tools]
        if request.tool_choice is not None:
            kwargs["tool_choice"] = _tool_choice(request.tool_choice)
        if request.json_output and self.send_optional:
            kwargs["response_format"] = {"type": "json_object"}
        if request.temperature is not None and self.send_optional:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        return kwargs

    def _drop_optional(self, exc: openai.OpenAIError, kwargs: dict[str, Any]) -> bool:
        """On HTTP 400, retry once without the optional parameters some servers refuse
        (JSON mode, temperature), and stop sending them to this endpoint."""
        sent = [k for k in OPTIONAL_PARAMETERS if k in kwargs]
        if not sent or not isinstance(exc, openai.BadRequestError):
            return False
        log.warning("model %s refused the request (HTTP 400); retrying without %s",
                    self.model, ", ".join(sent))
        for key in sent:
            del kwargs[key]
        self.send_optional = False
        return True

    def _retry_delay(self, exc: openai.OpenAIError, attempt: int) -> float | None:
        """Seconds to wait before the next try, or None if this error is final."""
        if attempt >= self.max_retries or not _retryable(exc):
            return None
        retry_after = _retry_after_s(exc)
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_S)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2**attempt)
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def _translate(self, exc: openai.OpenAIError) -> OneboxError:
        where = f"model {self.model!r} at {self.base_url or 'api.openai.com'}"
        if isinstance(exc, openai.APITimeoutError):
            return ProviderTimeout(f"{where} did not answer within {self.timeout_s:g}s "
                                   "(set ONEBOX_LLM__TIMEOUT_S to wait longer)")
        if isinstance(exc, openai.APIConnectionError):
            return ProviderError(f"cannot connect to {where}; {self.hints.endpoint}")
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        if status == 429:
            return RateLimited(f"{where} is rate limiting (HTTP 429) after "
                               f"{self.max_retries} retries; try again later")
        if status in (401, 403):
            return ConfigError(f"{where} refused the credentials (HTTP {status}); "
                               f"{self.hints.key}")
        if status == 404:
            return ConfigError(f"{where} was not found (HTTP 404); {self.hints.model}")
        if status is not None:
            return ProviderError(f"{where} failed with HTTP {status}")
        return ProviderError(f"{where} returned an unusable response ({type(exc).__name__})")


def _retryable(exc: openai.OpenAIError) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code in RETRY_STATUSES


def _retry_after_s(exc: openai.OpenAIError) -> float | None:
    """Retry-After (seconds or an HTTP date) or retry-after-ms, when the server sent one."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _tool_choice(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _message_to_openai(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def _to_response(completion: Any, model: str, latency_ms: float) -> ChatResponse:
    if not getattr(completion, "choices", None):
        raise ProviderError(f"model {model!r} returned no choices")
    choice = completion.choices[0]
    raw = choice.message
    calls = tuple(
        ToolCall(c.id, c.function.name, c.function.arguments or "")
        for c in (raw.tool_calls or ())
        if getattr(c, "function", None) is not None
    )
    usage = completion.usage
    return ChatResponse(
        message=Message.assistant(raw.content, calls),
        model=completion.model or model,
        usage=Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else Usage(),
        finish_reason=choice.finish_reason,
        latency_ms=latency_ms,
    )
