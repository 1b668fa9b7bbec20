"""`onebox run`, `show`, `runs`, `cancel`: submit plans and read the record back."""

from __future__ import annotations

import getpass
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from onebox.agent.plan import Plan, load_plan
from onebox.cli import common
from onebox.cli.foreground import INTERRUPTED_EXIT, CtrlC, Progress, settle
from onebox.cli.render import answer_panel, failure, run_header, runs_table, timeline
from onebox.config import Settings
from onebox.errors import PlanError
from onebox.llm.registry import chat_model_from_settings
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine import run_files
from onebox.runtime.engine.submit import Submitted
from onebox.runtime.models.profiles import needs_model, served_models
from onebox.runtime.models.providers import provider_of
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.explain import explain
from onebox.runtime.services.run_service import check_llm
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

T = TypeVar("T")
INTERRUPTED = "INTERRUPTED"  # the status _finish reports when the user pressed Ctrl-C
SQL_HINT = (
    "SELECT step_number, step_id, attempt, status, duration_ms, memory_used_mb, "
    "cpu_usage_percent, output_hash FROM onebox.task_execution WHERE run_id = '{run_id}' "
    "ORDER BY step_number, attempt;"
)


def register(main: click.Group) -> None:
    for command in (run_cmd, show_cmd, runs_cmd, cancel_cmd, approve_cmd, retry_cmd, explain_cmd):
        main.add_command(command)


@click.command("run")
@click.argument("target")
@click.option("--detach", is_flag=True, help="only submit the run and print its id")
@click.option("--name", help="a name for the run (default: the plan's name)")
@click.option("--idempotency-key", help="submitting the same key again returns the same run "
              "(the keys the API uses for tenant 'default' too); the same key with a different "
              "plan or task is refused")
@click.option("--profile", help="the agent profile whose model does the task's model work "
              "(`onebox profile list`); default: this machine's model settings")
@click.option("--file", "files", multiple=True, type=click.Path(path_type=Path),
              help="a file or directory placed in the run's workspace before its first step "
              "(a directory keeps its name: --file reports/ gives reports/...); repeatable")
@click.option("-v", "--verbose", is_flag=True, help="a task: show the agent's work too (its "
              "model calls and their replies, every attempt's output) and the SQL; a plan "
              "file always shows its whole timeline")
@common.json_option
def run_cmd(target: str, detach: bool, name: str | None, idempotency_key: str | None,
            profile: str | None, files: tuple[Path, ...], verbose: bool, as_json: bool) -> None:
    """Run a plan file (YAML or JSON), or ask the agent to do TARGET in words."""
    settings = common.settings()
    if Path(target).exists():
        plan = load_plan_or_fail(Path(target))
        status = common.run(_run_plan(settings, plan, detach=detach, name=name,
                                      idempotency_key=idempotency_key, as_json=as_json,
                                      files=files))
    elif _looks_like_a_path(target):
        common.fail(f"plan file {target} does not exist", code=2)
    else:
        if profile is None:
            if not settings.llm.model:  # names both fixes: a stored profile, or a model
                common.run_sync(lambda: check_llm(settings))
            common.run_sync(lambda: chat_model_from_settings(settings.llm))  # says what to set
        status = common.run(_run_task(settings, target, detach=detach, name=name,
                                      idempotency_key=idempotency_key, profile=profile,
                                      as_json=as_json, files=files, verbose=verbose))
    codes = {"SUCCEEDED": 0, "PENDING": 0, INTERRUPTED: INTERRUPTED_EXIT}
    raise click.exceptions.Exit(codes.get(status, 1))


def _looks_like_a_path(target: str) -> bool:
    return " " not in target.strip() and target.endswith((".yaml", ".yml", ".json"))


def load_plan_or_fail(path: Path) -> Plan:
    try:
        return load_plan(path)
    except PlanError as exc:
        common.fail(f"plan {path} refused, nothing was run: {exc.message}", code=2)


async def _run_plan(settings: Settings, plan: Any, *, detach: bool, name: str | None,
                    idempotency_key: str | None, as_json: bool,
                    files: tuple[Path, ...] = ()) -> str:
    async with await Runtime.open(settings) as rt:
        inputs = await run_files.stage_local(rt.db, rt.objects, files, settings.runtime)
        submitted = await rt.submit(plan, name=name, idempotency_key=idempotency_key,
                                    inputs=inputs)
        if detach:
            _print_submitted(submitted, as_json)
            return "PENDING"
        if not as_json:
            common.out.print(f"run [bold cyan]{submitted.run_id}[/] started "
                             f"({len(plan.steps)} steps, backend {rt.backend.name})")
        return await _finish(rt, submitted.run_id, as_json)


async def _run_task(settings: Settings, task: str, *, detach: bool, name: str | None,
                    idempotency_key: str | None, profile: str | None, as_json: bool,
                    files: tuple[Path, ...] = (), verbose: bool = False) -> str:
    async with await Runtime.open(settings) as rt:
        inputs = await run_files.stage_local(rt.db, rt.objects, files, settings.runtime)
        run_id, existing = await submit_task(rt.db, task, name=name, profile=profile,
                                             idempotency_key=idempotency_key, settings=settings,
                                             inputs=inputs)
        run = await runs_api.get_run(rt.db, run_id)
        model, trace = run["profile"] or {}, run["trace_id"]
        if detach:
            _print_submitted(Submitted(run_id, trace, existing), as_json)
            return "PENDING"
        if not as_json:
            common.out.print(f"run [bold cyan]{run_id}[/] started: the agent plans "
                             f"'{task}' with {model.get('model') or settings.llm.model}")
        await _warn_if_not_served(rt, settings, model)
        return await _finish(rt, run_id, as_json, brief=not verbose)


async def _warn_if_not_served(rt: Runtime, settings: Settings, profile: dict[str, Any]) -> None:
    """A run whose model this process cannot call waits for a worker that can: say so."""
    key = needs_model(profile)
    async with rt.db.connection() as conn:
        served = await served_models(conn, settings)
    if key is not None and key not in served:
        common.err.print(f"this process cannot call {profile['model']} at provider "
                         f"{provider_of(profile)!r} (not declared here, or its key variable "
                         "is not set): the run waits for a worker that can (`onebox worker` started "
                         "with it); Ctrl-C cancels", markup=False)


async def _finish(rt: Runtime, run_id: uuid.UUID, as_json: bool, *, brief: bool = False) -> str:
    """Drive the run here until it ends (Ctrl-C cancels it), then print its timeline, or
    (``brief``, a task's default) the user's steps as they run, the failure once and the
    answer."""
    console = common.err if as_json else common.out  # --json keeps stdout for the document
    live = not as_json and (console.is_terminal or not brief)
    with Progress(rt.db, run_id, console, live=live, lines=brief and not as_json) as watch, \
            CtrlC(rt.db, run_id, console, on_first=watch.stop) as ctrl_c:
        final = await rt.drive(run_id, progress=watch.update)
        await settle(rt.db, rt.settings, run_id, console)
    tl = await runs_api.run_timeline(rt.db, run_id, limit=None if brief else runs_api.PAGE_STEPS)
    if as_json:
        common.print_json(tl)
    elif brief:
        _print_brief(tl)
    else:
        common.out.print(timeline(tl["run"], tl["steps"], summary=tl["summary"],
                                  answer_on_top=False))
        _print_sql_hint(rt.db, run_id)
        if (answer := answer_panel(tl["run"])) is not None:
            common.out.print(answer)
    return INTERRUPTED if ctrl_c.pressed else str(final["status"])


def _print_brief(tl: dict[str, Any]) -> None:
    """The run's status (and error), each failed step's output once, the answer, and where
    the rest is."""
    run = tl["run"]
    common.out.print(run_header(run))
    for panel in failure(tl["steps"]):
        common.out.print(panel)
    if (answer := answer_panel(run)) is not None:
        common.out.print(answer)
    common.out.print(f"every step, the model's replies and resources: onebox show {run['id']}; "
                     f"why each step ran: onebox explain {run['id']}", style="dim",
                     markup=False, soft_wrap=True)


def _print_submitted(submitted: Any, as_json: bool) -> None:
    if as_json:
        common.print_json({"run_id": submitted.run_id, "trace_id": submitted.trace_id,
                           "existing": submitted.existing})
    else:
        common.echo(str(submitted.run_id))


def _print_sql_hint(db: Database, run_id: uuid.UUID) -> None:
    psql = "psql"
    if db.embedded:
        from onebox.store.embedded import psql_path

        psql = str(psql_path(db.server))
    common.out.print("\nThe same rows in SQL:", style="bold")
    common.out.print(f"{psql} '{db.url}' -c \"{SQL_HINT.format(run_id=run_id)}\"",
                     soft_wrap=True, markup=False)


@click.command("show")
@click.argument("run_id")
@click.option("--limit", default=runs_api.PAGE_STEPS, show_default=True,
              type=click.IntRange(1, 100_000), help="step attempts per page")
@click.option("--after", "after", metavar="CURSOR",
              help="start after this cursor (printed at the end of the previous page)")
@click.option("--all", "show_all", is_flag=True, help="every step attempt, in one page")
@common.json_option
def show_cmd(run_id: str, limit: int, after: str | None, show_all: bool, as_json: bool) -> None:
    """Print a run's summary and timeline: steps, status, durations, resources, output tails.

    A big run is shown a page at a time (--limit, --after CURSOR, or --all).
    RUN_ID may be a unique prefix of the id, here and in every command that takes one."""
    def page(db: Database, rid: uuid.UUID) -> Awaitable[dict[str, Any]]:
        return runs_api.run_timeline(db, rid, limit=None if show_all else limit, after=after)

    tl = _with_run(run_id, page)
    if as_json:
        common.print_json(tl)
        return
    common.out.print(timeline(tl["run"], tl["steps"], summary=tl["summary"]))
    if tl["next"] is not None:
        common.out.print(f"more steps: onebox show {tl['run']['id']} --after {tl['next']}"
                         f"{'' if limit == runs_api.PAGE_STEPS else f' --limit {limit}'}"
                         " (or --all)", style="dim", soft_wrap=True)


def _with_run(text: str, work: Callable[[Database, uuid.UUID], Awaitable[T]],
              settings: Settings | None = None) -> T:
    """Resolve TEXT (a run id or a unique prefix of one), then ``work(db, run_id)``."""
    async def go(db: Database) -> T:
        return await work(db, await runs_api.resolve_id(db, text))

    return common.with_db(settings or common.settings(), go)


@click.command("runs")
@click.option("--status", type=click.Choice(
    ["PENDING", "RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED", "DEAD"],
    case_sensitive=False))
@click.option("--dead", "shortcut", flag_value="DEAD", help="only DEAD runs (dead letters)")
@click.option("--waiting", "shortcut", flag_value="WAITING", help="only runs waiting for approval")
@click.option("--stale", is_flag=True, help="only runs the watchdog flagged as silent")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@common.json_option
def runs_cmd(status: str | None, shortcut: str | None, stale: bool, limit: int,
             as_json: bool) -> None:
    """List recent runs."""
    settings = common.settings()
    wanted = (status or shortcut or "").upper() or None

    async def listed(db: Database) -> tuple[list[dict[str, Any]], dict[uuid.UUID, str] | None]:
        rows = await runs_api.list_runs(db, status=wanted, limit=limit, stale=stale)
        narrow = not as_json and common.out.width < common.WIDE_COLUMNS
        return rows, await runs_api.short_ids(db, [r["id"] for r in rows]) if narrow else None

    rows, ids = common.with_db(settings, listed)
    if as_json:
        common.print_json({"runs": rows})
    elif not rows:
        common.out.print("no runs match" if wanted or stale
                         else "no runs yet: try `onebox run examples/quickstart.yaml`")
    else:
        common.out.print(runs_table(rows, ids))


@click.command("cancel")
@click.argument("run_id")
def cancel_cmd(run_id: str) -> None:
    """Cancel a run: queued steps are dropped and running steps are stopped."""
    async def cancel(db: Database, rid: uuid.UUID) -> uuid.UUID:
        await runs_api.cancel_run(db, rid)
        return rid

    common.echo(f"run {_with_run(run_id, cancel)} cancelled")


@click.command("explain")
@click.argument("run_id")
@common.json_option
def explain_cmd(run_id: str, as_json: bool) -> None:
    """Why each step ran, was skipped, retried or replaced, from the stored events."""
    async def decisions(db: Database, rid: uuid.UUID) -> tuple[uuid.UUID, list[Any]]:
        return rid, await explain(db, rid)

    rid, rows = _with_run(run_id, decisions)
    if as_json:
        common.print_json({"run_id": rid, "decisions": rows})
        return
    width = max((len(str(r["step"] or "-")) for r in rows), default=1)
    for r in rows:
        common.echo(f"{str(r['step'] or '-'):<{width}}  {r['kind']:<8} {r['reason']}")


@click.command("approve")
@click.argument("run_id")
@click.argument("step_id")
@click.option("--reject", is_flag=True, help="reject instead: the run fails with your comment")
@click.option("--comment", help="recorded with the decision")
@click.option("--by", default=getpass.getuser, show_default="your user name",
              help="who decided")
def approve_cmd(run_id: str, step_id: str, reject: bool, comment: str | None, by: str) -> None:
    """Approve (or --reject) a step waiting for a person; the run resumes."""
    settings = common.settings()

    async def decide(db: Database, rid: uuid.UUID) -> tuple[uuid.UUID, str]:
        return rid, await runs_api.approve_step(db, settings, rid, step_id, approve=not reject,
                                                by=by, comment=comment)

    rid, status = _with_run(run_id, decide, settings)
    common.echo(f"step {step_id} {'rejected' if reject else 'approved'}; run {rid} is {status}")


@click.command("retry")
@click.argument("run_id")
def retry_cmd(run_id: str) -> None:
    """Retry a DEAD run: its failed steps are queued again (finished steps are kept)."""
    settings = common.settings()

    async def retry(db: Database, rid: uuid.UUID) -> tuple[uuid.UUID, list[str]]:
        return rid, await runs_api.retry_run(db, settings, rid)

    rid, steps = _with_run(run_id, retry, settings)
    common.echo(f"run {rid} queued again: {', '.join(steps) or 'no failed steps'}; "
               "a worker (`onebox worker`) picks it up")
