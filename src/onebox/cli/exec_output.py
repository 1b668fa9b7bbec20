"""What both paths of `onebox exec` share (through a server, or in this process without
one): the options of a call, and how its output is shown and reported."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

import click

from onebox.cli import common
from onebox.cli.render import safe_text
from onebox.client.types import CellOutput, ExecResult


@dataclass(frozen=True)
class ExecOptions:
    code: str
    language: str
    allow_domains: list[str]
    timeout_s: float | None
    memory_mb: int | None
    environment: str | None
    stateless: bool
    session: str | None  # None: a fresh session
    keep: bool
    live: bool  # print output as it arrives (not with --json)


def announce(session_id: str, opts: ExecOptions) -> None:
    if opts.session is None and opts.keep:
        common.err.print(f"onebox exec: session {session_id} (reuse it with --session "
                         f"{session_id})", markup=False, soft_wrap=True)


def live_callbacks() -> dict[str, Any]:
    return {"on_stdout": _writer(sys.stdout), "on_stderr": _writer(sys.stderr),
            "on_result": show_result}


def _writer(stream: TextIO) -> Any:
    def write(text: str) -> None:
        stream.write(for_stream(stream, text))
        stream.flush()
    return write


def for_stream(stream: TextIO, text: str) -> str:
    """What the code printed, as ``stream`` takes it: control sequences escaped on a
    terminal (they would drive it: clipboard, title, screen), as printed into a pipe or
    file (`onebox exec ... > out` keeps the bytes)."""
    return safe_text(text) if stream.isatty() else text


def show_result(output: CellOutput) -> None:
    """The main result's text as a REPL shows it; other rich outputs by type and size."""
    if output.is_main_result and output.text is not None:
        click.echo(for_stream(sys.stdout, output.text))
        return
    kinds = ", ".join(f"{mime} ({len(value)} chars)" for mime, value in output.data.items())
    common.err.print(f"onebox exec: a rich result: {kinds} (--json prints it)", markup=False)


def payload(result: ExecResult, session_id: str, interpreter: str, *,
            printed: bool = False) -> dict[str, Any]:
    raw = result.raw
    return {
        "session_id": session_id, "interpreter": interpreter, "exit_code": result.exit_code,
        "ok": result.exit_code == 0, "stdout": result.stdout, "stderr": result.stderr,
        "timed_out": result.timed_out, "truncated": result.truncated,
        "duration_ms": result.duration_ms, "memory_peak_mb": result.memory_peak_mb,
        "files_written": result.files_written,
        "blocked_hosts": sorted({str(b.get("host")) for b in result.blocked_network}),
        "blocked_network": result.blocked_network,
        "results": [{"data": r.data, "is_main_result": r.is_main_result}
                    for r in result.results],
        "error": raw.get("error") if isinstance(raw.get("error"), dict) else None,
        "execution_count": result.execution_count, "state_lost": result.state_lost,
        "restart_reason": result.restart_reason, "printed": printed,
        "sandbox_error": raw.get("error") if isinstance(raw.get("error"), str) else None,
    }
