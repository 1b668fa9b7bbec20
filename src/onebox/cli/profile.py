"""`onebox profile create|list|show|rm`: agent profiles (which model does a run's model work)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from onebox.cli import common
from onebox.errors import ValidationError as OneboxValidationError
from onebox.runtime.models import profiles as service
from onebox.runtime.threads.context import DEFAULT_BUDGET_TOKENS, MEMORY_SHARE, RECENT_TURNS
from onebox.store.db import Database

TENANT = "default"  # the CLI works as the default tenant, as the API's default tenant does
THREAD_DEFAULTS = {"context_tokens": DEFAULT_BUDGET_TOKENS, "context_turns": RECENT_TURNS,
                   "context_memory_share": MEMORY_SHARE}
FLAGS = {"tools": "--tool", "allow_domains": "--allow-domain"}  # where a flag is not the field


def register(main: click.Group) -> None:
    main.add_command(profile)


@click.group("profile")
def profile() -> None:
    """Agent profiles: provider and model, memory scope, tools, limits."""


@profile.command("create")
@click.argument("name")
@click.option("--model", required=True, help="the model name at the provider")
@click.option("--provider", help="a provider the operator declared (`onebox provider list`; "
              "default: the process's own model settings)")
@click.option("--instructions", help="added to the system prompt of every model call")
@click.option("--memory-scope", help="the memory scope the agent remembers into and recalls")
@click.option("--tool", "tools", multiple=True, help="a catalog tool the agent may use "
              "(repeat; default: every tool)")
@click.option("--timeout-s", type=float, help="default timeout of the agent's steps")
@click.option("--memory-mb", type=int, help="default memory limit of the agent's steps")
@click.option("--allow-domain", "allow_domains", multiple=True,
              help="a domain the agent's steps may reach (repeat)")
@click.option("--environment", help="a built environment the agent's steps use "
              "(`onebox env list`)")
@click.option("--context-tokens", type=int, help="a thread turn's context budget in tokens "
              "(200-1000000; default 4000)")
@click.option("--context-turns", type=int, help="the last turns a thread turn's context "
              "holds verbatim (0-50; default 4)")
@click.option("--context-memory-share", type=float, help="the share of a thread turn's "
              "context budget recalled memories may take (0.05-0.9; default 0.45)")
@common.json_option
def create_cmd(name: str, as_json: bool, **fields: Any) -> None:
    """Create or replace the profile NAME."""
    data = {k: (list(v) if isinstance(v, tuple) else v) for k, v in fields.items()}
    data["tools"] = data["tools"] or None
    parsed = common.run_sync(lambda: _parse(name, data))

    async def go(db: Database) -> dict[str, Any]:
        async with db.connection() as conn:
            return await service.save_profile(conn, settings, TENANT, parsed)

    settings = common.settings()
    saved = common.with_db(settings, go)
    if as_json:
        common.print_json(saved)
    else:
        common.out.print(f"profile [bold]{name}[/] saved: {parsed.model} at provider "
                         f"{parsed.provider or 'default'}")


def _parse(name: str, data: dict[str, Any]) -> service.Profile:
    """The profile, or an error naming the flag (``--context-tokens``) rather than the field."""
    try:
        return service.parse_profile({"name": name, **data})
    except OneboxValidationError as exc:
        field = (exc.field or "").split(".")[0]
        if field not in data:
            raise
        flag = FLAGS.get(field, "--" + field.replace("_", "-"))
        raise OneboxValidationError(f"{flag} {data[field]!r}: {exc.message}",
                                    field=field) from None


@profile.command("list")
@common.json_option
def list_cmd(as_json: bool) -> None:
    """List the profiles."""

    async def go(db: Database) -> list[dict[str, Any]]:
        async with db.connection() as conn:
            return await service.list_profiles(conn, TENANT)

    rows = common.with_db(common.settings(), go)
    if as_json:
        common.print_json({"profiles": rows})
        return
    table = Table("name", "provider", "model", "memory scope")
    for row in rows:
        spec = row["spec"]
        table.add_row(row["name"], spec.get("provider") or "default", spec["model"],
                      spec.get("memory_scope") or "")
    common.out.print(table)


@profile.command("show")
@click.argument("name")
@common.json_option
def show_cmd(name: str, as_json: bool) -> None:
    """Show one profile."""

    async def go(db: Database) -> dict[str, Any]:
        async with db.connection() as conn:
            return await service.get_profile(conn, TENANT, name)

    found = common.with_db(common.settings(), go)
    if as_json:
        common.print_json(found)
        return
    spec = {**found["spec"]}
    for key, default in THREAD_DEFAULTS.items():
        if spec.get(key) is None:
            spec[key] = f"{default} (default)"
    for key, value in spec.items():
        if value not in (None, [], ""):
            common.out.print(f"{key}: {value}", markup=False, soft_wrap=True)


@profile.command("rm")
@click.argument("name")
def rm_cmd(name: str) -> None:
    """Delete a profile (runs keep the copy they were submitted with)."""

    async def go(db: Database) -> None:
        async with db.connection() as conn:
            await service.delete_profile(conn, TENANT, name)

    common.with_db(common.settings(), go)
    common.out.print(f"profile {name} deleted")
