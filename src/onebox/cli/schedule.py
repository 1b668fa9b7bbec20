"""`onebox schedule add|list|remove`: cron schedules that submit a plan file."""

from __future__ import annotations

from pathlib import Path

import click

from onebox.cli import common
from onebox.cli.runs import load_plan_or_fail
from onebox.runtime.services import schedules


def register(main: click.Group) -> None:
    main.add_command(schedule_group)


@click.group("schedule")
def schedule_group() -> None:
    """Cron schedules; workers fire each slot exactly once."""


@schedule_group.command("add")
@click.argument("name")
@click.argument("cron")
@click.argument("plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def add_cmd(name: str, cron: str, plan_file: Path) -> None:
    """Submit PLAN_FILE at every CRON slot (UTC), e.g. '0 3 * * *'."""
    settings = common.settings()
    plan = load_plan_or_fail(plan_file)

    row = common.with_db(settings, lambda db: schedules.add_schedule(db, name, cron, plan))
    common.echo(f"schedule {name} added; first slot {row['next_at'].isoformat()}")


@schedule_group.command("list")
@common.json_option
def list_cmd(as_json: bool) -> None:
    """List schedules with their next slot and how often they fired."""
    settings = common.settings()

    rows = common.with_db(settings, schedules.list_schedules)
    if as_json:
        common.print_json({"schedules": [{k: v for k, v in r.items() if k != "plan"}
                                         for r in rows]})
        return
    for r in rows:
        common.echo(f"{r['name']:20} {r['cron']:15} next {r['next_at'].isoformat()} "
                   f"fired {r['fired']}x")
    if not rows:
        common.echo("no schedules")


@schedule_group.command("remove")
@click.argument("name")
def remove_cmd(name: str) -> None:
    """Remove a schedule (runs it already submitted are kept)."""
    settings = common.settings()

    common.with_db(settings, lambda db: schedules.remove_schedule(db, name))
    common.echo(f"schedule {name} removed")
