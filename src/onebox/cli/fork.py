"""Time travel: `onebox fork RUN --at STEP` (a new run that keeps what finished before STEP
and goes on from STEP with a change, runtime/services/forks) and `onebox diff A B`
(two runs step by step, runtime/services/run_compare)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from onebox.cli import common
from onebox.cli.runs import _finish, load_plan_or_fail
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.forks import fork_json, fork_run
from onebox.runtime.services.service import Runtime

TEXT_FIELDS = frozenset({"code", "tool", "description", "name", "environment", "kind"})


def register(main: click.Group) -> None:
    main.add_command(fork_cmd)
    main.add_command(diff_cmd)


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
@click.option("--profile", help="a task run: the stored profile whose model is asked from "
              "STEP on (what the agent observed before STEP is kept)")
@click.option("--detach", is_flag=True, help="only create the fork and print its id")
@common.json_option
def fork_cmd(run_id: str, at: str, plan_file: Path | None, sets: tuple[str, ...],
             profile: str | None, detach: bool, as_json: bool) -> None:
    """Fork a finished run at STEP: keep what finished before it, change something, go on.

    A run of code steps goes on with a changed step (--set) or plan (--plan); a task run
    goes on from STEP with another model (--profile)."""
    settings = common.settings()
    changes = parse_set(sets)
    plan = load_plan_or_fail(plan_file).to_data() if plan_file else None
    async def go() -> str:
        async with await Runtime.open(settings) as rt:
            parent = await runs_api.resolve_id(rt.db, run_id)
            forked = await fork_run(rt.db, settings, parent, "default", at=at, plan=plan,
                                    changes=changes, profile=profile)
            if detach:
                if as_json:
                    common.print_json(fork_json(forked))
                else:
                    common.echo(str(forked.run_id))
                return "PENDING"
            if not as_json:
                going = ", ".join(forked.rerun) or f"the agent goes on from {at}"
                common.out.print(
                    f"run [bold cyan]{forked.run_id}[/] forked from {parent} at {at}: "
                    f"kept {', '.join(forked.inherited) or 'no step'}; running {going}")
            return await _finish(rt, forked.run_id, as_json)

    status = common.run(go())
    raise click.exceptions.Exit(0 if status in ("SUCCEEDED", "PENDING") else 1)



@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--all", "show_all", is_flag=True, help="list the steps that are the same too")
@common.json_option
def diff_cmd(run_a: str, run_b: str, show_all: bool, as_json: bool) -> None:
    """Compare two runs step by step: status, output, files each step wrote, model calls.

    Exit code 0 when every step is the same, 1 when one differs."""
    from onebox.runtime.services.run_compare import diff_runs

    settings = common.settings()

    async def go() -> dict[str, Any]:
        async with await Runtime.open(settings) as rt:
            a = await runs_api.resolve_id(rt.db, run_a)
            b = await runs_api.resolve_id(rt.db, run_b)
            return await diff_runs(rt.db, rt.objects, a, b, "default")

    found = common.run(go())
    if as_json:
        common.print_json(found)
    else:
        _print_diff(found, show_all)
    raise click.exceptions.Exit(0 if found["first_difference"] is None else 1)


def _print_diff(found: dict[str, Any], show_all: bool) -> None:
    common.echo(f"a: run {found['run_a']}\nb: run {found['run_b']}")
    for step in found["steps"]:
        if step["same"] and not show_all:
            continue
        a, b = step["a"], step["b"]
        head = "same   " if step["same"] else "differs"
        sides = " -> ".join(f"{s['status']} exit {s['exit_code']}" if s else "absent"
                            for s in (a, b))
        common.echo(f"{head} {step['step_id']}: {sides}")
        for stream in ("stdout", "stderr"):
            text = step.get(stream)
            if text and not text["same"]:
                common.echo(text["diff"].rstrip("\n") + ("\n(cut)" if text["cut"] else ""))
        files = step.get("files") or {}
        for delta in files.get("files", []):
            common.echo(f"  file {delta['path']}: {delta['change']} between the runs")
            if delta.get("diff"):
                common.echo(delta["diff"].rstrip("\n"))
        calls = step.get("model_calls") or {}
        if calls.get("differ"):
            common.echo(f"  model calls differ: {calls['a']} in a, {calls['b']} in b")
    if found["first_difference"] is None:
        common.echo("every step is the same")
    else:
        common.echo(f"{len(found['differing'])} step(s) differ; the first is "
                    f"{found['first_difference']}")
