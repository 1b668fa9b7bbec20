"""`onebox doctor`: each check with what was found and, when it failed, how to fix it."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from onebox.cli import common
from onebox.runtime.services.doctor import machine, run_checks


def register(main: click.Group) -> None:
    main.add_command(doctor_cmd)


@click.command("doctor")
@click.option("--brief", is_flag=True, help="one line per check")
@common.json_option
def doctor_cmd(brief: bool, as_json: bool) -> None:
    """Report what works on this machine (database, sandbox, kernel features, models)."""
    settings = common.settings()
    checks = common.run(run_checks(settings))
    failed = [c for c in checks if not c.ok and c.level == "error"]
    if as_json:
        common.print_json({"machine": machine(), "home": settings.home, "ok": not failed,
                           "checks": [c.to_dict() for c in checks]})
    elif brief:
        for c in checks:
            mark = "ok  " if c.ok else ("WARN" if c.level == "warning" else "FAIL")
            common.out.print(f"{mark} {c.name}: {c.detail}", markup=False, soft_wrap=True)
    else:
        table = Table(title=f"onebox doctor - {machine()}", title_justify="left")
        for col in ("check", "", "found", "fix"):
            table.add_column(col)
        for c in checks:
            mark = "[green]ok[/]" if c.ok else ("[yellow]warn[/]" if c.level == "warning"
                                                else "[red]FAIL[/]")
            table.add_row(c.name, mark, escape(c.detail), "" if c.ok else escape(c.fix or ""))
        common.out.print(table)
    raise click.exceptions.Exit(1 if failed else 0)
