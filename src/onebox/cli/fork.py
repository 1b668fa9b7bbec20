"""`onebox fork RUN --at STEP`: a new run that keeps what finished before STEP and goes on
from STEP with a change (runtime/services/forks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from onebox.cli import common
from onebox.cli.runs import _finish, _with_run, load_plan_or_fail
from onebox.runtime.services.forks import fork_json, fork_run
from onebox.runtime.services.service import Runtime

TEXT_FIELDS = frozenset({"code", "tool", "description", "name", "environment", "kind"})


def register(main: click.Group) -> None:
    main.add_command(fork_cmd)


def parse_set(items: tuple[str, ...]) -> dict[str, Any]:
    """``STEP.FIELD=VALUE`` pairs; a value is JSON when it parses (numbers, lists,
    objects), except for text fields (code, tool...), which are taken as written."""
    changes: dict[str, Any] = {}
    for item in items:
        target, sep, value = item.partition("=")
        if not sep or "." not in target:
            common.fail(f"--set {item!r}: write STEP.FIELD=VALUE (s3.code='echo hi')", code=2)
        parsed: Any = value
        if target.rsplit(".", 1)[-1] not in TEXT_FIELDS:
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = value
        changes[target] = parsed
    return changes


@click.command("fork")
@click.argument("run_id")
@click.option("--at", "at", required=True, help="the step to go on from: the steps that "
              "finished before it are kept, the workspace is as it was just before it")
@click.option("--plan", "plan_file", type=click.Path(path_type=Path),
              help="go on with this plan instead of the run's (same step ids are matched)")
@click.option("--set", "sets", multiple=True, metavar="STEP.FIELD=VALUE",
              help="change one field of a step (s3.code='echo hi', s3.limits.timeout_s=60); "
                   "repeatable")
@click.option("--detach", is_flag=True, help="only create the fork and print its id")
@common.json_option
def fork_cmd(run_id: str, at: str, plan_file: Path | None, sets: tuple[str, ...],
             detach: bool, as_json: bool) -> None:
    """Fork a finished run at STEP: keep what finished before it, change something, go on."""
    settings = common.settings()
    changes = parse_set(sets)
    plan = load_plan_or_fail(plan_file).to_data() if plan_file else None
    parent = _with_run(run_id, lambda db, rid: _resolved(rid), settings)

    async def go() -> str:
        async with await Runtime.open(settings) as rt:
            forked = await fork_run(rt.db, settings, parent, "default", at=at, plan=plan,
                                    changes=changes)
            if detach:
                if as_json:
                    common.print_json(fork_json(forked))
                else:
                    common.echo(str(forked.run_id))
                return "PENDING"
            if not as_json:
                common.out.print(
                    f"run [bold cyan]{forked.run_id}[/] forked from {parent} at {at}: "
                    f"kept {', '.join(forked.inherited) or 'no step'}; running "
                    f"{', '.join(forked.rerun)}")
            return await _finish(rt, forked.run_id, as_json)

    status = common.run(go())
    raise click.exceptions.Exit(0 if status in ("SUCCEEDED", "PENDING") else 1)


async def _resolved(run_id: Any) -> Any:
    return run_id

