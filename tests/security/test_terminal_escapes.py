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
