"""`onebox tools list`: the tool catalog a plan's ``kind: tool`` steps may name."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from onebox.cli import common
from onebox.runtime.agent.tools import catalog_tools
from onebox.store import catalog
from onebox.store.db import Database


def register(main: click.Group) -> None:
    main.add_command(tools)


@click.group("tools")
def tools() -> None:
    """The tool catalog: built-in and registered tools."""


@tools.command("list")
@common.json_option
def list_cmd(as_json: bool) -> None:
    """List every tool a plan may name (`kind: tool`, `input.name`)."""

    async def go(db: Database) -> list[dict[str, Any]]:
        return [_row(t) for t in await catalog_tools(db)]

    rows = common.with_db(common.settings(), go)
    if as_json:
        common.print_json({"tools": rows})
        return
    table = Table("name", "kind", "cost", "formats", "description")
    for row in rows:
        table.add_row(row["name"], "built-in" if row["builtin"] else "registered",
                      row["cost_class"], ", ".join(row["formats"]), row["description"])
    common.out.print(table)


def _row(tool: catalog.CatalogTool) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "builtin": tool.builtin,
            "language": tool.language, "cost_class": tool.cost_class,
            "formats": list(tool.formats), "requires": list(tool.requires),
            "input_schema": tool.input_schema}
