"""Choosing the chat model from settings, and the scripted in-process model."""

from __future__ import annotations

import pytest

from onebox.config import LLMPrice, LLMSettings, load_settings
from onebox.errors import ConfigError
from onebox.llm.base import ChatRequest, ChatResponse, Message, Usage, cost_usd
from onebox.llm.openai import OpenAIChatModel
from onebox.llm.registry import chat_model_from_settings, parse_model_spec, price_table
from onebox.testing import ScriptedModel, ScriptExhausted, tool_call_reply


def test_nothing_configured_says_exactly_what_to_set() -> None:
    with pytest.raises(ConfigError) as info:
        chat_model_from_settings(LLMSettings())
    for env in ("ONEBOX_LLM__MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        assert env in info.value.message
    assert info.value.field == "llm.model"


def test_environment_selects_an_openai_compatible_model(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: object) -> None:
    monkeypatch.setenv("ONEBOX_LLM__MODEL", "openai:kimi-k2.6")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    model = chat_model_from_settings(load_settings().llm)
    assert isinstance(model, OpenAIChatModel)
    assert model.model == "kimi-k2.6" and model.base_url == "http://127.0.0.1:9/v1"
    assert model.name == "openai:kimi-k2.6"


def test_model_spec_parsing_keeps_colons_in_model_names() -> None:
    assert parse_model_spec("openai:gpt-4o") == ("openai", "gpt-4o")
    assert parse_model_spec("deepseek-chat") == ("openai", "deepseek-chat")
    assert parse_model_spec("qwen2.5:7b") == ("openai", "qwen2.5:7b")
    with pytest.raises(ConfigError, match="names no model"):
        parse_model_spec("openai:")


def test_openai_without_key_or_base_url_is_refused() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        chat_model_from_settings(LLMSettings(model="gpt-4o-mini"))
    local = chat_model_from_settings(LLMSettings(model="llama3", base_url="http://x:11434/v1"))
    assert isinstance(local, OpenAIChatModel)


def test_price_table_and_cost() -> None:
    settings = LLMSettings(prices={"kimi-k2.6": LLMPrice(input_per_mtok=0.6, output_per_mtok=2.5)})
    prices = price_table(settings)
    cost = cost_usd("openai:kimi-k2.6", Usage(1_000_000, 200_000), prices)
    assert cost == pytest.approx(0.6 + 0.5)
    assert cost_usd("unknown", Usage(5, 5), prices) is None


async def test_scripted_model_replies_in_order_and_records_requests() -> None:
    model = ScriptedModel(["plain", {"a": 1}, tool_call_reply("f", {"x": 2}),
                           lambda req: f"echo {req.messages[-1].content}",
                           ChatResponse(Message.assistant("raw"), "m", Usage(1, 2))])
    replies = [await model.chat([Message.user(str(i))]) for i in range(5)]
    assert replies[0].content == "plain"
    assert replies[1].content == '{"a": 1}'
    assert replies[2].tool_calls[0].parsed_arguments() == {"x": 2}
    assert replies[3].content == "echo 3"
    assert replies[4].usage == Usage(1, 2)
    assert [r.messages[0].content for r in model.requests] == ["0", "1", "2", "3", "4"]
    with pytest.raises(ScriptExhausted, match="request #6"):
        await model.complete(ChatRequest((Message.user("more"),)))


def test_request_and_response_round_trip_through_dicts() -> None:
    req = ChatRequest((Message.user("x"),), json_output=True, max_tokens=5)
    assert ChatRequest.from_dict(req.to_dict()) == req
    resp = ChatResponse(tool_call_reply("f", {}), "m", Usage(3, 4), "tool_calls", 1.5)
    assert ChatResponse.from_dict(resp.to_dict()) == resp
