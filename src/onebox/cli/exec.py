"""`onebox exec`: run code in a sandbox session, from the command line, with the code's exit code.

Where the session's interpreter lives: in the process that serves it. With a onebox server
running (ONEBOX_URL, or the address a local `onebox serve`/`up` records in ONEBOX_HOME) exec
goes through the SDK, so interpreter state persists across calls. With none, it runs
in-process: files persist in the session, interpreter state does not outlive the call.
Both paths print the same JSON fields.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import click
import httpx

from onebox.cli import common
from onebox.cli.exec_output import (
    ExecOptions,
    announce,
    for_stream,
    live_callbacks,
    payload,
    show_result,
)
from onebox.client import spec
from onebox.client.types import CellOutput
from onebox.config import Settings
from onebox.errors import ValidationError

TENANT = "default"
SESSION_ID = r"^api-[0-9a-f]{16}$"
TIMEOUT_EXIT = 124


def register(main: click.Group) -> None:
    main.add_command(exec_cmd)


@click.command("exec")
@click.option("--session", default="new", show_default=True, metavar="ID|new",
              help="run in this session (api-…), or a fresh one")
@click.option("--lang", "language", type=click.Choice(["python", "bash", "node"]),
              default="python", show_default=True)
@click.option("--allow-domain", "allow_domains", multiple=True, metavar="DOMAIN",
              help="let the code reach this domain (repeatable); no network otherwise")
@click.option("--timeout-s", type=click.FloatRange(0, 3600, min_open=True),
              help="kill the code after this many seconds (exit 124)")
@click.option("--memory-mb", type=click.IntRange(16, 65536), help="memory limit")
@click.option("--env", "environment", metavar="NAME", help="a built environment (onebox env)")
@click.option("--stateless", is_flag=True, help="python in a fresh one-shot process, not the "
              "session's interpreter")
@click.option("--keep", is_flag=True, help="keep the fresh session (its id goes to stderr)")
@click.option("-f", "--file", "code_file", type=click.File("r"), help="read the code from FILE")
@common.json_option
@click.argument("code", nargs=-1)
def exec_cmd(session: str, language: str, allow_domains: tuple[str, ...],
             timeout_s: float | None, memory_mb: int | None, environment: str | None,
             stateless: bool, keep: bool, code_file: TextIO | None, as_json: bool,
             code: tuple[str, ...]) -> None:
    """Run CODE (after --), or -f FILE, or the code on stdin, in a sandbox session.

    The exit code is the code's: 1 for an exception in the interpreter, 124 for a timeout."""
    opts = ExecOptions(
        code=common.run_sync(lambda: _code(code, code_file)), language=language,
        allow_domains=list(allow_domains), timeout_s=timeout_s, memory_mb=memory_mb,
        environment=environment, stateless=stateless,
        session=common.run_sync(lambda: _session_arg(session)), keep=keep, live=not as_json)
    settings = common.settings()
    payload = _run(settings, opts)
    _report(payload, as_json)
    sys.exit(payload["exit_code"])


def _code(args: tuple[str, ...], code_file: TextIO | None) -> str:
    if args and code_file is not None:
        raise ValidationError("give the code either after -- or with -f FILE, not both",
                              field="code")
    text = " ".join(args) if args else code_file.read() if code_file else _stdin()
    if not text.strip():
        raise ValidationError("no code to run: pass it after --, with -f FILE, or on stdin "
                              "(`echo 'print(1)' | onebox exec`)", field="code")
    return text


def _stdin() -> str:
    return "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()


def _session_arg(value: str) -> str | None:
    import re

    if value == "new":
        return None
    if not re.match(SESSION_ID, value):
        raise ValidationError(f"--session {value!r} is not a session id: give `new` or an id "
                              "like api-0123456789abcdef (printed by `onebox exec --keep`)",
                              field="--session")
    return value


def _run(settings: Settings, opts: ExecOptions) -> dict[str, Any]:
    if opts.environment is not None and opts.session is not None:
        common.fail("--env applies to a new session (a session keeps the environment it was "
                    "created with): drop --env, or drop --session", code=2)
    server = _server_url(settings)
    if server is not None:
        return common.run_sync(lambda: _via_server(server, _api_key(settings), opts))
    from onebox.cli.exec_local import run_in_process

    return common.run(run_in_process(settings, opts))


def _server_url(settings: Settings) -> str | None:
    """ONEBOX_URL as given; else a recorded local server's address, if it answers."""
    import os

    if os.environ.get("ONEBOX_URL"):
        return spec.resolve_url(None)
    recorded = spec.recorded_url(settings.home)
    if recorded is None:
        return None
    try:
        httpx.get(f"{recorded}/healthz", timeout=2.0)
    except httpx.TransportError:
        return None  # a stale address (the server died without removing it): in-process
    return recorded.rstrip("/")


def _api_key(settings: Settings) -> str | None:
    import os

    key = os.environ.get("ONEBOX_API_KEY")
    if key:
        return key
    first = settings.home / "first-api-key"
    return first.read_text().strip() if first.is_file() else None


def _via_server(url: str, api_key: str | None, opts: ExecOptions) -> dict[str, Any]:
    from onebox.client import Client

    with Client(url, api_key, timeout_s=max(60.0, (opts.timeout_s or 0) + 60)) as client:
        session = client.sessions.get(opts.session) if opts.session else \
            client.sessions.create(environment=opts.environment)
        announce(session.id, opts)
        try:
            result = session.exec(opts.code, opts.language, stateless=opts.stateless,
                                  timeout_s=opts.timeout_s, memory_mb=opts.memory_mb,
                                  allow_domains=opts.allow_domains, **_live(opts.live))
        finally:
            if opts.session is None and not opts.keep:
                session.delete()
    return payload(result, session.id, "server", printed=opts.live)


def _live(live: bool) -> dict[str, Any]:
    return live_callbacks() if live else {}


def _report(data: dict[str, Any], as_json: bool) -> None:
    printed = data.pop("printed")
    if as_json:
        common.print_json(data)
        return
    if not printed:
        _print_output(data)
    for line in _notes(data):
        common.err.print(f"onebox exec: {line}", markup=False, soft_wrap=True)


def _print_output(data: dict[str, Any]) -> None:
    sys.stdout.write(for_stream(sys.stdout, data["stdout"]))
    sys.stdout.flush()
    sys.stderr.write(for_stream(sys.stderr, data["stderr"]))
    for item in data["results"]:
        show_result(CellOutput(item["data"], item["is_main_result"]))


def _notes(data: dict[str, Any]) -> list[str]:
    notes = []
    error = data["error"]
    if error and error.get("traceback") and error["traceback"] not in data["stderr"]:
        sys.stderr.write(error["traceback"].rstrip("\n") + "\n")
    if data["timed_out"]:
        notes.append(f"timed out (exit {TIMEOUT_EXIT})")
    if data["state_lost"] and data["restart_reason"]:
        notes.append(str(data["restart_reason"]))
    if data["sandbox_error"]:
        notes.append(str(data["sandbox_error"]))
    if data["blocked_hosts"]:
        notes.append("network blocked: " + ", ".join(data["blocked_hosts"]) +
                     " (allow a domain with --allow-domain)")
    if data["truncated"]:
        notes.append("output truncated")
    return notes

