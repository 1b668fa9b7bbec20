"""Model requests the agent sends, and parsing of what comes back. Prompts are data files.

Prompt templates live in ``onebox/agent/prompts/*.md`` (``string.Template``
syntax: ``$name``) and are loaded with :mod:`importlib.resources`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import Any

from onebox.agent.actions import Intent, ToolHint
from onebox.agent.context import dependency_text, inputs_shape
from onebox.agent.plan import Plan, Step
from onebox.agent.steps import document_paths
from onebox.llm.base import ChatRequest, ChatResponse, Message

FENCE = re.compile(r"```[A-Za-z0-9_+-]*\s*\n(.*?)```", re.DOTALL)


@cache
def prompt(name: str) -> Template:
    """The prompt template ``prompts/<name>.md``."""
    text = resources.files("onebox.agent").joinpath(f"prompts/{name}.md").read_text("utf-8")
    return Template(text)


def _request(user_text: str) -> ChatRequest:
    messages = (Message.system(prompt("system").template.strip()), Message.user(user_text))
    return ChatRequest(messages=messages, json_output=True, temperature=0.0)


def intent_request(request: str) -> ChatRequest:
    return _request(prompt("intent").substitute(request=request))


def plan_request(request: str, intent: Intent, tools: Sequence[ToolHint]) -> ChatRequest:
    text = prompt("plan").substitute(
        request=request, intent=json.dumps(intent.to_dict(), indent=1), tools=tool_lines(tools)
    )
    return _request(text)


def tool_lines(tools: Sequence[ToolHint]) -> str:
    if not tools:
        return ("- python, bash, node (code steps), http, knowledge_search, knowledge_read, "
                "memory, approval, final")
    lines = []
    for t in tools:
        rate = "no history" if t.success_rate is None else f"{t.success_rate:.0%} of {t.runs} runs"
        lines.append(f"- {t.name} ({t.cost_class}, {rate}): {t.description}")
    return "\n".join(lines)


def repair_request(previous: ChatRequest, reply: ChatResponse, error: str) -> ChatRequest:
    """The same conversation plus the unusable reply and what was wrong with it."""
    messages = (*previous.messages, reply.message,
                Message.user(prompt("repair").substitute(error=error)))
    return ChatRequest(messages=messages, json_output=True, temperature=0.0)


def code_request(step: Step, request: str, deps: Mapping[str, Any], loop: Mapping[str, Any],
                 limit: int, environment: str = "") -> ChatRequest:
    """Write-code prompt: environment, inputs' shape, each dependency once (to ``limit`` bytes)."""
    loop_text = "".join(f"\n{k} = {clip(v, limit)}" for k, v in loop.items())
    text = prompt("write_code").substitute(
        language=step.tool, step_id=step.id, goal=step.goal or step.description or "",
        request=request or "(a plan file)", deps=dependency_text(deps, limit),
        inputs=inputs_shape(deps, loop, document_paths(step)), environment=environment or "(not measured)",
        loop=("\nLoop values (the code reads them from the same file, keys \"item\", "
              "\"index\", \"iteration\"):" + loop_text + "\n") if loop else "",
    )
    return _request(text)


def fix_request(step: Step, code: str, error: str, when: str) -> ChatRequest:
    text = prompt("fix_code").substitute(
        language=step.tool, step_id=step.id, when=when,
        goal=step.goal or step.description or "(see the code)", code=code, error=error,
    )
    return _request(text)


def replan_request(request: str, plan: Plan, version: int, reason: str,
                   states: Mapping[str, str]) -> ChatRequest:
    text = prompt("replan").substitute(
        request=request or "(a plan file)", reason=reason, version=version,
        plan=json.dumps(plan.to_data(), indent=1),
        states="\n".join(f"- {sid}: {state}" for sid, state in states.items()),
    )
    return _request(text)


def clip(value: Any, limit: int) -> str:
    """JSON text of ``value`` cut to ``limit`` characters (head and tail kept)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, indent=1)
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]}\n...[{len(text) - 2 * half} characters cut]...\n{text[-half:]}"


def extract_json(response: ChatResponse) -> Any:
    """The JSON value of a reply: the first tool call's arguments, else the message text
    (fences and surrounding prose tolerated). ValueError says why it is not JSON."""
    if response.tool_calls:
        return json.loads(response.tool_calls[0].arguments or "{}")
    text = response.content.strip()
    if not text:
        raise ValueError("the reply was empty; expected a JSON object")
    fenced = FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(text[start:end + 1])
            except json.JSONDecodeError:
                pass
        raise ValueError(f"the reply is not valid JSON ({exc.msg} at line {exc.lineno} "
                         f"column {exc.colno})") from None


def parse_intent(response: ChatResponse) -> Intent:
    data = extract_json(response)
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object with the key 'goal'")
    goal = data.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError("'goal' must be a non-empty string")
    lists = {}
    for key in ("entities", "capabilities", "formats", "risks", "fallbacks"):
        value = data.get(key) or []
        if not isinstance(value, list):
            raise ValueError(f"'{key}' must be a list of strings")
        lists[key] = tuple(str(v) for v in value)
    return Intent(goal=goal.strip(), **lists)


def parse_code(response: ChatResponse) -> str:
    """The program in a reply: {"code": ...}, else a fenced block, else the whole text."""
    text = response.content.strip()
    try:
        data = extract_json(response)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        code: str = data["code"]
    else:
        fenced = FENCE.search(text)
        code = fenced.group(1) if fenced else text
    if not code.strip():
        raise ValueError('the reply has no code; expected {"code": "<program>"}')
    return code
