"""`onebox env build|list|show|rm`: environments, package layers built with pip in a sandbox."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from onebox.cli import common
from onebox.runtime.environments import service
from onebox.store.db import Database

TENANT = "default"  # the CLI works as the default tenant, as the API's default tenant does


def register(main: click.Group) -> None:
    main.add_command(env)


@click.group("env")
def env() -> None:
    """Environments: package lists built once into read-only layers steps and sessions use."""


@env.command("build")
@click.argument("name")
@click.option("--package", "packages", multiple=True,
              help="a requirement, e.g. pandas or requests>=2 (repeat; default for `data`: "
              "numpy, pandas, matplotlib)")
@common.json_option
def build_cmd(name: str, packages: tuple[str, ...], as_json: bool) -> None:
    """Build NAME (a new version), or reuse the layer of the same package list."""
    settings = common.settings()

    def progress(line: str) -> None:
        if not as_json:
            common.err.print(f"[dim]{escape(line)}[/]", soft_wrap=True)

    async def go(db: Database) -> dict[str, Any]:
        from onebox.sandbox.registry import get_backend

        backend = get_backend(settings)
        try:
            return await service.build(db, backend, settings, TENANT, name, list(packages),
                                       progress)
        finally:
            await backend.close()

    row = common.with_db(settings, go)
    if as_json:
        common.print_json(row)
    else:
        _print_built(row)
    if row["status"] != "READY":
        raise SystemExit(1)


def _print_built(row: dict[str, Any]) -> None:
    name = f"{row['name']} v{row['version']}"
    if row["status"] != "READY":
        common.err.print(f"[bold red]{escape(name)} failed:[/] {escape(row['error'] or '')}\n"
                         f"{escape(row['log_tail'][-1500:])}", soft_wrap=True)
        return
    how = "reused" if row["reused"] else f"built in {row['build_ms'] / 1000:.1f} s"
    common.out.print(f"environment [bold]{escape(name)}[/] {how}: "
                     f"{', '.join(row['packages'])} ({_size(row['size_bytes'])}, "
                     f"layer {row['sha256'][:12]})")


def _size(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:.1f} MB"


@env.command("list")
@common.json_option
def list_cmd(as_json: bool) -> None:
    """The latest version of each environment."""

    async def go(db: Database) -> list[dict[str, Any]]:
        return await service.list_environments(db, TENANT)

    rows = common.with_db(common.settings(), go)
    if as_json:
        common.print_json({"environments": rows})
        return
    table = Table("name", "version", "status", "packages", "size")
    for row in rows:
        table.add_row(row["name"], str(row["version"]), row["status"],
                      ", ".join(row["packages"]), _size(row["size_bytes"]))
    common.out.print(table)


@env.command("show")
@click.argument("name")
@common.json_option
def show_cmd(name: str, as_json: bool) -> None:
    """One environment: its latest version, its packages and its versions."""

    async def go(db: Database) -> dict[str, Any]:
        return await service.show(db, TENANT, name)

    found = common.with_db(common.settings(), go)
    if as_json:
        common.print_json(found)
        return
    for key in ("name", "version", "status", "python_version", "sha256", "size_bytes",
                "file_count", "build_ms", "error"):
        common.out.print(f"[bold]{key}:[/] {escape(str(found[key]))}")
    common.out.print(f"[bold]packages:[/] {escape(', '.join(found['packages']))}")
    common.out.print(f"[bold]versions:[/] {len(found['versions'])}")


@env.command("rm")
@click.argument("name")
@common.json_option
def rm_cmd(name: str, as_json: bool) -> None:
    """Delete every version of NAME (refused while a profile uses it)."""
    settings = common.settings()

    async def go(db: Database) -> dict[str, Any]:
        return await service.remove(db, settings, TENANT, name)

    done = common.with_db(settings, go)
    if as_json:
        common.print_json(done)
    else:
        common.out.print(f"environment {escape(name)} removed "
                         f"({done['versions_deleted']} versions)")
