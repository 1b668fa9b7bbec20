"""What sandboxed code prints reaches the operator's terminal escaped: `onebox logs`, `show`
and `runs` never pass a clipboard write (OSC 52), a window title, a clear-screen, a C1
control or a bidirectional override through, while the text stays readable."""

from __future__ import annotations

import asyncio
import re

from click.testing import CliRunner

from onebox.agent.plan import parse_plan
from onebox.cli.main import main
from onebox.config import Settings
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

NASTY = ("clip\x1b]52;c;Y3VybCBldmlsfHNo\x07 title\x1b]0;pwned\x07 clear\x1b[2J\x1bc "
         "csi\x9b31m rtl\u202etxt.exe bell\x07 done")
CODE = f"import sys\nsys.stdout.write({NASTY!r} + '\\n')\nsys.stderr.write({NASTY!r})\n"
PLAN = {"name": "terminal\x1b]0;name-title\x07", "steps": [
    {"id": "nasty", "tool": "python", "code": CODE}]}
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


async def onebox(settings: Settings, *args: str) -> tuple[int, str, str]:
    env = {"ONEBOX_HOME": str(settings.home), "COLUMNS": "200",
           "ONEBOX_DATABASE_URL": settings.database_url.get_secret_value()}  # type: ignore[union-attr]
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


async def test_sandbox_output_is_shown_escaped(db: Database, backend: SandboxBackend,
                                               settings: Settings) -> None:
    submitted = await submit_plan(db, settings, parse_plan(PLAN))
    await asyncio.wait_for(Worker(db, backend, settings, run_id=submitted.run_id)
                           .serve(asyncio.Event()), 60)
    run = str(submitted.run_id)
    shown = {args: await onebox(settings, *args)
             for args in (("logs", run), ("show", run), ("runs",))}
    for args, (code, out, err) in shown.items():
        assert code == 0, (args, err)
        assert not CONTROL.findall(out + err), (args, CONTROL.findall(out + err))
    logs_out = shown[("logs", run)][1]
    assert "clip\\x1b]52;c;Y3VybCBldmlsfHNo\\x07" in logs_out  # readable, not interpreted
    assert "rtl\\u202etxt.exe" in logs_out and "done" in logs_out
    assert "clear\\x1b[2J" in shown[("show", run)][1]
    code, raw, _ = await onebox(settings, "logs", run, "--raw")  # asked for: the bytes
    assert code == 0 and "clip\x1b]52;c;Y3VybCBldmlsfHNo\x07" in raw


OUTPUT_FILE = "out\x1b]0;file-title\x07.txt"
FAILING = {"name": "fails", "steps": [
    {"id": "writes", "tool": "python", "code": (
        "import os\nos.makedirs('output', exist_ok=True)\n"
        f"open('output/' + {OUTPUT_FILE!r}, 'w').write('x')\n"
        f"open({OUTPUT_FILE!r}, 'w').write('x')\nprint({NASTY!r})\n")},
    {"id": "dies", "tool": "python", "depends_on": ["writes"],
     "code": f"import sys\nsys.stderr.write({NASTY!r})\nsys.exit(3)\n"},
]}


async def test_every_command_escapes_what_a_run_produced(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    """explain (a failure's reason quotes stderr), logs of several steps (their headers),
    files (a name the code chose), snapshots: no control character reaches the terminal."""
    from onebox.objects import get_object_store

    settings.runtime.max_attempts = 1
    submitted = await submit_plan(db, settings, parse_plan(FAILING))
    objects = get_object_store(settings)
    try:
        await asyncio.wait_for(Worker(db, backend, settings, run_id=submitted.run_id,
                                      objects=objects).serve(asyncio.Event()), 60)
    finally:
        await objects.close()
    run = str(submitted.run_id)
    commands = [("explain", run), ("logs", run), ("files", run), ("show", run),
                ("snapshot", "list", "--run", run), ("runs", "--status", "DEAD")]
    shown = {args: await onebox(settings, *args) for args in commands}
    snaps = re.findall(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b", shown[commands[4]][1])
    for snap in snaps[:2]:
        shown[("snapshot", "show", snap)] = await onebox(settings, "snapshot", "show", snap)
    assert len(shown) >= len(commands) + 1, "a snapshot of the run was listed (the probe ran)"
    for args, (_code, out, err) in shown.items():
        assert not CONTROL.findall(out + err), (args, CONTROL.findall(out + err), out + err)
    assert "\\x1b[2J" in shown[("logs", run)][1] + shown[("logs", run)][2]
    assert "out\\x1b]0;file-title" in "".join(o for o, _ in (
        (shown[("files", run)][1], 0), *((v[1], 0) for k, v in shown.items()
                                          if k[:2] == ("snapshot", "show"))))


def test_markup_in_a_name_plants_no_hyperlink() -> None:
    """A table cell is read as rich markup: a file name or step id holding `[link=...]`
    would become an OSC 8 hyperlink on the operator's terminal. The CLI's consoles print
    no link at all (the plain console, the control, does)."""
    import io

    from rich.console import Console
    from rich.table import Table

    from onebox.cli.common import SafeConsole

    name = "report[link=http://evil.example/steal]click me[/link].txt"
    shown = {}
    for kind in (Console, SafeConsole):
        out = io.StringIO()
        table = Table("file")
        table.add_row(name)
        kind(file=out, force_terminal=True, highlight=False, width=120).print(table)
        shown[kind.__name__] = out.getvalue()
    assert "\x1b]8;" in shown["Console"]  # the probe reaches its target
    assert "\x1b]8;" not in shown["SafeConsole"] and "evil.example" not in shown["SafeConsole"]
    assert "click me" in shown["SafeConsole"]
