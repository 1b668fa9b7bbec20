"""The ChatModel contract, run against every chat backend: the scripted one and OpenAI over HTTP.

Each backend is fed the same script (text, JSON, a tool call) and must give the same
ChatResponse data back, serialisable and free of provider types.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from onebox.llm.base import ChatModel, ChatRequest, ChatResponse, Message, ToolSpec
from onebox.llm.openai import OpenAIChatModel
from onebox.testing import ScriptedModel, ScriptedOpenAIServer, ServerReply, tool_call_reply

SCRIPT: list[tuple[Any, ServerReply]] = [
    ("plain text", ServerReply.text("plain text")),
    ({"answer": 42}, ServerReply.json({"answer": 42})),
    (tool_call_reply("lookup", {"q": "x"}), ServerReply.tool_call("lookup", {"q": "x"})),
]


@pytest.fixture(params=["scripted", "openai-http"])
async def make_model(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], ChatModel]]:
    if request.param == "scripted":
        yield lambda: ScriptedModel([item for item, _ in SCRIPT])
        return
    with ScriptedOpenAIServer([reply for _, reply in SCRIPT]) as server:
        yield lambda: OpenAIChatModel("contract", base_url=server.base_url, api_key="k")


async def test_backend_honours_the_chat_model_contract(make_model: Callable[[], ChatModel]) -> None:
    model = make_model()
    tools = (ToolSpec("lookup", "look something up", {"type": "object"}),)
    text = await model.complete(ChatRequest((Message.user("hi"),)))
    data = await model.complete(ChatRequest((Message.user("json"),), json_output=True))
    call = await model.complete(ChatRequest((Message.user("call"),), tools=tools))
    await model.aclose()

    assert text.content == "plain text" and text.tool_calls == ()
    assert json.loads(data.content) == {"answer": 42}
    (tool_call,) = call.tool_calls
    assert (tool_call.name, tool_call.parsed_arguments()) == ("lookup", {"q": "x"})
    for reply in (text, data, call):
        assert isinstance(reply, ChatResponse) and reply.message.role == "assistant"
        assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
        assert ChatResponse.from_dict(json.loads(json.dumps(reply.to_dict()))) == reply
    assert ":" in model.name and model.supports_tools
