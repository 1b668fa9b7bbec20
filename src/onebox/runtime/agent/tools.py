"""The catalog as the agent meets it: ranked tools answer a LookupTools action, and a
``kind: tool`` step becomes the code step the sandbox runs.

Storage and ranking live in :mod:`onebox.store.catalog` (SQL only); this module
joins them to the agent's actions and plan model.
"""

from __future__ import annotations

import json
from typing import Any

from onebox.agent.actions import LookupTools, ToolHint, ToolsResult
from onebox.agent.expressions import TEMPLATE, ExpressionError, evaluate
from onebox.agent.plan import Step
from onebox.errors import ValidationError
from onebox.store import catalog
from onebox.store.catalog import CatalogTool, Conn, RankedTool, rank_tools
from onebox.store.db import Database


def tool_hint(tool: RankedTool) -> ToolHint:
    """The planner's view of a ranked tool (pass these to ``Agent(tools=...)`` / ToolsResult)."""
    return ToolHint(tool.name, tool.description, tool.cost_class, tool.success_rate, tool.runs)


async def lookup_tools(conn: Conn, action: LookupTools, *, max_cost: str = "HIGH",
                       limit: int = 8) -> ToolsResult:
    """Answer the agent's LookupTools: the best tools over all its formats, best first
    (formats it does not name fall back to plain text)."""
    best: dict[str, RankedTool] = {}
    for fmt in action.formats or ("txt",):
        for tool in await rank_tools(conn, format=fmt, max_cost=max_cost, limit=limit):
            if tool.name not in best or tool.score > best[tool.name].score:
                best[tool.name] = tool
    ranked = sorted(best.values(), key=lambda t: (-t.score, -t.runs, t.name))[:limit]
    return ToolsResult(action.id, tuple(tool_hint(t) for t in ranked))


def expand_tool_step(tool: CatalogTool, step: Step) -> Step:
    """A ``kind: tool`` step as the code step the sandbox runs.

    The code template's ``{{ expr }}`` placeholders are evaluated over the step's
    arguments (``input`` without ``name``) and inserted as JSON literals, so a string
    argument becomes a quoted string in Python or JavaScript code. Arguments the
    tool's ``input_schema`` requires must be present (ValidationError otherwise).
    """
    if tool.code_template is None or tool.language is None:
        raise ValidationError(f"tool {tool.name!r} has no code template; it cannot run as a "
                              "step", field=f"steps[{step.id}].input.name")
    args = {k: v for k, v in step.input.items() if k != "name"}
    missing = [k for k in tool.input_schema.get("required", ()) if k not in args]
    if missing:
        raise ValidationError(f"tool {tool.name!r} needs the argument(s) {', '.join(missing)}",
                              field=f"steps[{step.id}].input.{missing[0]}")

    def literal(match: Any) -> str:
        try:
            return json.dumps(evaluate(match.group(1), args))
        except ExpressionError as exc:
            raise ValidationError(f"tool {tool.name!r} template: {exc}",
                                  field=f"steps[{step.id}].input") from None

    code = TEMPLATE.sub(literal, tool.code_template)
    domains = tuple(step.allow_domains) + tuple(tool.permissions.get("network") or ())
    return step.model_copy(update={"kind": "code", "tool": tool.language, "code": code,
                                   "allow_domains": tuple(dict.fromkeys(domains))})


async def catalog_tools(db: Database) -> list[CatalogTool]:
    """Every tool a plan may name, built-in and registered (the API and `onebox tools list`)."""
    async with db.connection() as conn:
        return await catalog.list_tools(conn)


async def ranked_tools(db: Database, *, format: str, max_cost: str, limit: int) -> list[RankedTool]:
    """Tools for ``format`` costing at most ``max_cost``, best success rate first."""
    async with db.connection() as conn:
        return await rank_tools(conn, format=format, max_cost=max_cost, limit=limit)
