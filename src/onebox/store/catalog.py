"""The tool catalog: tools as nodes, typed edges, ranked by historical success rate.

Built-in tools (python, bash, node, http, knowledge_search, memory_remember,
memory_recall, approval, final_answer) are installed by migration 0005. Users
register their own from a Python entry point (:func:`tools_from_entry_points`) or
from YAML::

    name: pdf_tables
    description: Extract the tables of a PDF as CSV
    language: python
    input_schema: {type: object, required: [path], properties: {path: {type: string}}}
    code_template: |
      import pdfplumber ...  {{ path }}
    permissions: {network: []}
    cost_class: MEDIUM          # FREE | LOW | MEDIUM | HIGH
    formats: [pdf]              # SUPPORTS_FORMAT edges
    requires: [python]          # REQUIRES edges (other tools)
    alternatives: [knowledge_search]   # ALTERNATIVE_TO edges

:func:`rank_tools` answers "tools that support format X with cost at most C,
by historical success rate" with one recursive SQL statement. This module only
stores and ranks; the agent-facing parts (answering LookupTools, expanding a
``kind: tool`` step from its code template) are :mod:`onebox.runtime.agent.tools`.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from psycopg.types.json import Jsonb
from pydantic import BaseModel, ConfigDict, Field

from onebox.bounds import load_yaml
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.store.db import Conn
from onebox.store.queries import load_queries

Q = load_queries("catalog")
CostClass = Literal["FREE", "LOW", "MEDIUM", "HIGH"]
ENTRY_POINT_GROUP = "onebox.tools"
TOOL_NAME_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"


class CatalogTool(BaseModel):
    """A tool as registered: the node and its outgoing edges."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(min_length=1)
    language: Literal["python", "bash", "node"] | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    code_template: str | None = None
    permissions: dict[str, Any] = Field(default_factory=dict)
    cost_class: CostClass = "LOW"
    formats: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    builtin: bool = False


@dataclass(frozen=True)
class RankedTool:
    name: str
    description: str
    cost_class: str
    success_rate: float | None
    runs: int
    successes: int
    score: float
    requires: tuple[str, ...]
    alternatives: tuple[str, ...]
    builtin: bool


def parse_tool(data: Any) -> CatalogTool:
    """Validate a tool definition; ValidationError names the field and what to write."""
    if not isinstance(data, Mapping):
        raise ValidationError("a tool definition must be a mapping with name and description")
    if data.get("builtin"):
        raise ValidationError("builtin is set by onebox; remove it", field="builtin")
    try:
        tool = CatalogTool.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field; allowed: " + ", ".join(sorted(CatalogTool.model_fields))
        raise ValidationError(f"tool {data.get('name', '?')!r}: {field}: {msg}",
                              field=field) from None
    if tool.code_template is not None and tool.language is None:
        raise ValidationError("a code_template needs a language (python, bash or node)",
                              field="language")
    return tool.model_copy(update={"formats": tuple(f.lower() for f in tool.formats)})


def load_tool_file(path: str | Path) -> CatalogTool:
    p = Path(path)
    try:
        data = load_yaml(p.read_text(encoding="utf-8"), what=str(p))
    except OSError as exc:
        raise ValidationError(f"cannot read tool file {p}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ValidationError(f"{p} is not valid YAML: {exc}") from exc
    return parse_tool(data)


def tools_from_entry_points(group: str = ENTRY_POINT_GROUP) -> list[CatalogTool]:
    """Tools that installed packages declare as ``[project.entry-points."onebox.tools"]``.

    An entry point names a CatalogTool, a mapping in the YAML schema, or a callable
    returning either. Register them with :func:`register_tool`.
    """
    tools = []
    for entry in importlib.metadata.entry_points(group=group):
        try:
            value = entry.load()
        except (ImportError, AttributeError) as exc:
            raise ValidationError(f"entry point {entry.name} = {entry.value} of group {group} "
                                  f"cannot be loaded: {exc}") from exc
        if callable(value) and not isinstance(value, CatalogTool):
            value = value()
        tools.append(value if isinstance(value, CatalogTool) else parse_tool(value))
    return tools


async def register_tool(conn: Conn, tool: CatalogTool) -> None:
    """Create or replace a user tool and its edges. Call inside a transaction."""
    cur = await conn.execute(Q["upsert_tool"], {
        "name": tool.name, "description": tool.description, "language": tool.language,
        "input_schema": Jsonb(tool.input_schema), "code_template": tool.code_template,
        "permissions": Jsonb(tool.permissions),
    })
    if await cur.fetchone() is None:
        raise Conflict(f"{tool.name!r} is a built-in tool; register yours under another name")
    known = {r["name"] for r in await _rows(conn, "tools", {"name": None})}
    missing = sorted(set(tool.requires) - known)
    if missing:
        raise NotFound(f"tool {tool.name!r} requires {', '.join(missing)}, which "
                       "is not registered; register it first")
    await conn.execute(Q["delete_edges"], {"name": tool.name})
    edges = [("COSTS", tool.cost_class)] + [("SUPPORTS_FORMAT", f) for f in tool.formats]
    edges += [("REQUIRES", r) for r in tool.requires]
    edges += [("ALTERNATIVE_TO", a) for a in tool.alternatives]
    for type_, dst in edges:
        await conn.execute(Q["insert_edge"], {"src": tool.name, "type": type_, "dst": dst})


async def remove_tool(conn: Conn, name: str) -> None:
    cur = await conn.execute(Q["delete_tool"], {"name": name})
    if await cur.fetchone() is None:
        raise NotFound(f"no user tool named {name!r} (built-in tools cannot be removed)")


async def list_tools(conn: Conn) -> list[CatalogTool]:
    return [_tool(r) for r in await _rows(conn, "tools", {"name": None})]


async def get_tool(conn: Conn, name: str) -> CatalogTool:
    rows = await _rows(conn, "tools", {"name": name})
    if not rows:
        raise NotFound(f"no tool named {name!r}; `onebox tools list` shows the catalog")
    return _tool(rows[0])


async def rank_tools(conn: Conn, *, format: str, max_cost: CostClass | str = "HIGH",
                     limit: int = 10) -> list[RankedTool]:
    """Tools supporting ``format`` that cost at most ``max_cost``, best success rate first."""
    if max_cost.upper() not in ("FREE", "LOW", "MEDIUM", "HIGH"):
        raise ValidationError(f"max_cost {max_cost!r} must be FREE, LOW, MEDIUM or HIGH",
                              field="max_cost")
    rows = await _rows(conn, "rank_tools",
                       {"format": format, "max_cost": max_cost, "limit": limit})
    return [RankedTool(
        name=r["name"], description=r["description"], cost_class=r["cost_class"],
        success_rate=r["success_rate"], runs=r["runs"], successes=r["successes"],
        score=r["score"], requires=tuple(r["requires"]), alternatives=tuple(r["alternatives"]),
        builtin=r["builtin"],
    ) for r in rows]


async def _rows(conn: Conn, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(Q[name], params)
    return list(await cur.fetchall())


def _tool(row: Mapping[str, Any]) -> CatalogTool:
    return CatalogTool(
        name=row["name"], description=row["description"], language=row["language"],
        input_schema=row["input_schema"], code_template=row["code_template"],
        permissions=row["permissions"], cost_class=row["cost_class"],
        formats=tuple(row["formats"]), requires=tuple(row["requires"]),
        alternatives=tuple(row["alternatives"]), builtin=row["builtin"],
    )


async def tool_names(conn: Conn) -> list[str]:
    """The name of every tool in the catalog (built-in and registered), sorted."""
    return sorted(r["name"] for r in await _rows(conn, "tool_names", {}))
