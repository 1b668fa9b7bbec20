"""The OpenAI provider through the real `openai` client against a scripted HTTP server."""

from __future__ import annotations

import json

import openai
import pytest

from onebox.errors import ConfigError, ProviderError, ProviderTimeout, RateLimited
from onebox.llm.base import ChatRequest, Message, ToolCall, ToolSpec
from onebox.llm.openai import OpenAIChatModel
from onebox.testing import ScriptedOpenAIServer, ServerReply

HELLO = (Message.system("be brief"), Message.user("hello"))


class Sleeps:
    """Records the backoff delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def model_for(server: ScriptedOpenAIServer, **kwargs: object) -> tuple[OpenAIChatModel, Sleeps]:
    sleeps = Sleeps()
    model = OpenAIChatModel("kimi-test", base_url=server.base_url, api_key="sk-test",
                            sleep=sleeps, **kwargs)  # type: ignore[arg-type]
    return model, sleeps


async def test_text_reply_usage_and_request_shape() -> None:
    with ScriptedOpenAIServer([ServerReply.text("hi there", prompt_tokens=11,
                                                completion_tokens=3)]) as server:
        model, _ = model_for(server)
        reply = await model.complete(ChatRequest(HELLO, json_output=True, temperature=0.0))
        await model.aclose()
    assert reply.content == "hi there"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 3)
    assert reply.finish_reason == "stop" and reply.latency_ms >= 0
    body = server.requests[0]
    assert body["model"] == "kimi-test"
    assert body["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hello"}]
    assert body["response_format"] == {"type": "json_object"}
    assert server.headers[0]["authorization"] == "Bearer sk-test"


async def test_tool_call_round_trip() -> None:
    spec = ToolSpec("submit_plan", "submit a plan",
                    {"type": "object", "properties": {"steps": {"type": "array"}}})
    with ScriptedOpenAIServer([ServerReply.tool_call("submit_plan", {"steps": [1]})]) as server:
        model, _ = model_for(server)
        reply = await model.complete(ChatRequest(HELLO, tools=(spec,), tool_choice="submit_plan"))
    (call,) = reply.tool_calls
    assert call.name == "submit_plan" and call.parsed_arguments() == {"steps": [1]}
    body = server.requests[0]
    assert body["tools"][0]["function"]["name"] == "submit_plan"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "submit_plan"}}


async def test_tool_result_messages_are_sent_back() -> None:
    with ScriptedOpenAIServer([ServerReply.text("done")]) as server:
        model, _ = model_for(server)
        call = Message.assistant(None, [ToolCall("c1", "f", json.dumps({"x": 1}))])
        await model.chat([*HELLO, call, Message.tool("c1", "42")])
    sent = server.requests[0]["messages"]
    assert sent[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
    assert sent[3] == {"role": "tool", "content": "42", "tool_call_id": "c1"}


async def test_429_then_success_honours_retry_after() -> None:
    script = [ServerReply.error(429, retry_after=3), ServerReply.text("ok")]
    with ScriptedOpenAIServer(script) as server:
        model, sleeps = model_for(server)
        reply = await model.complete(ChatRequest(HELLO))
    assert reply.content == "ok"
    assert len(server.requests) == 2
    assert sleeps.delays == [3.0]


async def test_5xx_backs_off_exponentially_with_jitter() -> None:
    script = [ServerReply.error(503), ServerReply.error(502), ServerReply.error(500),
              ServerReply.text("ok")]
    with ScriptedOpenAIServer(script) as server:
        model, sleeps = model_for(server, backoff_base_s=1.0, backoff_max_s=3.0)
        assert (await model.complete(ChatRequest(HELLO))).content == "ok"
    assert len(sleeps.delays) == 3
    for delay, ceiling in zip(sleeps.delays, (1.0, 2.0, 3.0), strict=True):
        assert ceiling / 2 <= delay <= ceiling


async def test_persistent_429_raises_rate_limited_with_cause() -> None:
    with ScriptedOpenAIServer([ServerReply.error(429, retry_after=0)] * 3) as server:
        model, sleeps = model_for(server, max_retries=2)
        with pytest.raises(RateLimited) as info:
            await model.complete(ChatRequest(HELLO))
    assert len(server.requests) == 3 and len(sleeps.delays) == 2
    assert isinstance(info.value.__cause__, openai.RateLimitError)


@pytest.mark.parametrize(("status", "error"), [(401, ConfigError), (404, ConfigError),
                                                (400, ProviderError)])
async def test_client_errors_are_not_retried(status: int, error: type[Exception]) -> None:
    with ScriptedOpenAIServer([ServerReply.error(status), ServerReply.text("never")]) as server:
        model, sleeps = model_for(server)
        with pytest.raises(error) as info:
            await model.complete(ChatRequest(HELLO))
    assert len(server.requests) == 1 and sleeps.delays == []
    assert isinstance(info.value.__cause__, openai.APIStatusError)
    if status == 401:
        assert "OPENAI_API_KEY" in str(info.value)


async def test_timeout_maps_to_provider_timeout() -> None:
    with ScriptedOpenAIServer([ServerReply(200, {}, delay_s=5.0)]) as server:
        model, _ = model_for(server, timeout_s=0.3, max_retries=0)
        with pytest.raises(ProviderTimeout) as info:
            await model.complete(ChatRequest(HELLO))
    assert isinstance(info.value.__cause__, openai.APITimeoutError)


async def test_unreachable_endpoint_is_retried_then_provider_error() -> None:
    with ScriptedOpenAIServer() as server:
        url = server.base_url
    sleeps = Sleeps()
    model = OpenAIChatModel("m", base_url=url, api_key="k", max_retries=2, sleep=sleeps)
    with pytest.raises(ProviderError, match="cannot connect") as info:
        await model.complete(ChatRequest(HELLO))
    assert len(sleeps.delays) == 2
    assert isinstance(info.value.__cause__, openai.APIConnectionError)


async def test_an_endpoint_refusing_json_mode_is_asked_again_without_it() -> None:
    script = [ServerReply.error(400), ServerReply.text('{"a": 1}'), ServerReply.text("{}")]
    with ScriptedOpenAIServer(script) as server:
        model, sleeps = model_for(server)
        reply = await model.complete(ChatRequest(HELLO, json_output=True, temperature=0.0))
        await model.complete(ChatRequest(HELLO, json_output=True, temperature=0.0))
    assert reply.content == '{"a": 1}' and sleeps.delays == []
    first, second, third = server.requests
    assert first["response_format"] == {"type": "json_object"} and first["temperature"] == 0.0
    assert "response_format" not in second and "temperature" not in second
    assert "response_format" not in third


async def test_a_400_without_optional_parameters_is_final() -> None:
    with ScriptedOpenAIServer([ServerReply.error(400), ServerReply.error(400)]) as server:
        model, _ = model_for(server)
        with pytest.raises(ProviderError, match="HTTP 400"):
            await model.complete(ChatRequest(HELLO, json_output=True))
    assert len(server.requests) == 2
