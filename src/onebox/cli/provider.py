"""`onebox provider add|list|rm`: the model endpoints the operator declares.

Operator-only: it writes the database directly on the host (no API route changes providers).
A tenant's profile names one of these and a model; the URL and the key variable stay here.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from onebox.cli import common
from onebox.runtime.models import providers as service
from onebox.store.db import Database


def register(main: click.Group) -> None:
    main.add_command(provider)


@click.group("provider")
def provider() -> None:
    """Model providers (operator only): endpoint, key variable, the models tenants may use."""


@provider.command("add")
@click.argument("name")
@click.option("--base-url", required=True, help="the OpenAI-compatible endpoint (https://.../v1)")
@click.option("--api-key-env", help="the NAME of the environment variable holding the key on "
              "the workers (the key itself is never stored)")
@click.option("--model", "models", multiple=True, help="a model tenants may choose (repeat; "
              "default: any)")
@common.json_option
def add_cmd(name: str, base_url: str, api_key_env: str | None, models: tuple[str, ...],
            as_json: bool) -> None:
    """Declare (or replace) the provider NAME."""
    spec = common.run_sync(lambda: service.parse_provider(
        {"name": name, "base_url": base_url, "api_key_env": api_key_env, "models": list(models)}))

    async def go(db: Database) -> dict[str, Any]:
        async with db.connection() as conn:
            return await service.add_provider(conn, spec)

    settings = common.settings()
    saved = common.with_db(settings, go)
    if as_json:
        common.print_json(saved)
    else:
        common.out.print(f"provider {name} declared: {spec.base_url}", markup=False)
    if name in {p.name for p in settings.providers} or name == service.DEFAULT:
        common.err.print(f"note: {name!r} is also declared by this host's settings "
                         "(ONEBOX_PROVIDERS, or the process's own llm settings for 'default'), "
                         "which win on this host over the stored declaration", markup=False)


@provider.command("list")
@common.json_option
def list_cmd(as_json: bool) -> None:
    """The providers this host's settings and database declare."""
    settings = common.settings()

    async def go(db: Database) -> dict[str, service.Provider]:
        async with db.connection() as conn:
            return await service.declared(conn, settings)

    found = common.with_db(settings, go)
    if as_json:
        common.print_json({"providers": [vars(p) | {"models": list(p.models)}
                                         for p in found.values()]})
        return
    table = Table("name", "endpoint", "key variable", "models")
    for p in found.values():
        table.add_row(p.name, p.base_url or "(the OpenAI default)", p.api_key_env or "",
                      ", ".join(p.models) or "any")
    common.out.print(table)


@provider.command("rm")
@click.argument("name")
def rm_cmd(name: str) -> None:
    """Remove a stored provider (profiles naming it are refused at their next run)."""

    async def go(db: Database) -> None:
        async with db.connection() as conn:
            await service.remove_provider(conn, name)

    common.with_db(common.settings(), go)
    common.out.print(f"provider {name} removed")
