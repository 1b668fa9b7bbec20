"""`onebox logs RUN [STEP] [-f]` (issue 14 point 4): what the steps printed, per stream, of
one step or all, and followed live until the run ends."""

from __future__ import annotations

import asyncio
import io
import uuid

from click.testing import CliRunner
from rich.console import Console

from onebox.agent.plan import parse_plan
from onebox.cli.foreground import Progress
from onebox.cli.main import main
from onebox.config import Settings
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

PLAN = {"name": "logs", "steps": [
    {"id": "first", "tool": "bash",
     "code": "for i in 1 2 3; do echo \"one $i\"; echo \"oops $i\" >&2; sleep 0.7; done"},
    {"id": "second", "tool": "bash", "code": "echo two", "depends_on": ["first"]},
]}
FIRST_OUT = "one 1\none 2\none 3\n"



async def onebox(settings: Settings, *args: str) -> tuple[int, str, str]:
    env = {"ONEBOX_HOME": str(settings.home),
           "ONEBOX_DATABASE_URL": settings.database_url.get_secret_value()}  # type: ignore[union-attr]
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


async def _start(db: Database, backend: SandboxBackend,
                 settings: Settings) -> tuple[uuid.UUID, asyncio.Task[None]]:
    submitted = await submit_plan(db, settings, parse_plan(PLAN))
    worker = Worker(db, backend, settings, run_id=submitted.run_id)
    return submitted.run_id, asyncio.create_task(worker.serve(asyncio.Event()))


async def test_logs_prints_each_step_per_stream_and_one_step_alone(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, serving = await _start(db, backend, settings)
    await asyncio.wait_for(serving, 60)
    code, out, err = await onebox(settings, "logs", str(run_id))
    assert code == 0, err
    assert out == f"==> step first, attempt 1 <==\n{FIRST_OUT}==> step second, attempt 1 <==\ntwo\n"
    assert err == "oops 1\noops 2\noops 3\n"
    code, out, err = await onebox(settings, "logs", str(run_id)[:8], "second")
    assert (code, out, err) == (0, "two\n", "")


async def test_logs_follow_prints_while_running_and_returns_when_the_run_ends(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, serving = await _start(db, backend, settings)
    following = asyncio.create_task(onebox(settings, "logs", str(run_id), "first", "-f"))
    await asyncio.sleep(0.5)
    assert not serving.done(), "the run ended before `logs -f` could follow it"
    code, out, err = await following
    await asyncio.wait_for(serving, 60)
    assert (code, out, err) == (0, FIRST_OUT, "oops 1\noops 2\noops 3\n")


async def test_logs_of_an_unknown_step_names_the_steps(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, serving = await _start(db, backend, settings)
    await asyncio.wait_for(serving, 60)
    code, out, err = await onebox(settings, "logs", str(run_id), "nope")
    assert code == 1 and "has no step 'nope'" in err and "first, second" in err


async def test_foreground_progress_shows_the_running_steps_last_lines(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, serving = await _start(db, backend, settings)
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with Progress(db, run_id, console, live=True) as watch:
        while not serving.done() and "one 2" not in console.file.getvalue():  # type: ignore[attr-defined]
            await watch.update(run_id)
            watch.live.refresh()  # type: ignore[union-attr]
            await asyncio.sleep(0.05)
    await asyncio.wait_for(serving, 60)
    assert "one 2" in console.file.getvalue()  # type: ignore[attr-defined]
