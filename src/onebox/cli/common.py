"""What every command shares: settings built once, the async edge, errors, JSON output."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import json
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment

from onebox.cli.render import safe_text
from onebox.config import Settings, load_settings
from onebox.errors import ConfigError, OneboxError, ValidationError
from onebox.runtime.engine.tracing import LOG_FORMAT, ContextFilter, configure_exporter
from onebox.store.db import Database

T = TypeVar("T")


class SafeConsole(Console):
    """A console whose printed text never drives the terminal: every control character in
    what it prints (a step's output, a name, an error, a model's answer, in a table cell
    or a panel as much as a line) is shown escaped by :func:`~onebox.cli.render.safe_text`.
    Rich's own styling and cursor control are segments of their own and pass unchanged,
    but no segment carries a hyperlink: a name holding rich markup (``[link=...]``, read as
    markup in a table cell) cannot plant an OSC 8 link; the CLI makes none of its own."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(_safe(seg) for seg in buffer)


def _safe(seg: Segment) -> Segment:
    if seg.control:
        return seg
    style = seg.style.update_link(None) if seg.style is not None and seg.style.link else seg.style
    return Segment(safe_text(seg.text), style, seg.control)


WIDE_COLUMNS = 120  # narrower, tables show short unique id prefixes instead of whole ids
out = SafeConsole(highlight=False)
err = SafeConsole(stderr=True, highlight=False)


def echo(text: str) -> None:
    """A plain line on stdout, its control characters escaped (click.echo would pass them)."""
    click.echo(safe_text(text))


def settings() -> Settings:
    try:
        s = load_settings()
    except ConfigError as exc:  # one line per bad ONEBOX_* variable, with its form
        fail(exc.message, code=2)
    logging.basicConfig(level=s.log_level.upper(), format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(ContextFilter())
    configure_exporter(s.otel_exporter_otlp_endpoint)
    return s


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine at the CLI edge; onebox errors become a message and an exit code."""
    try:
        return asyncio.run(coro)
    except OneboxError as exc:
        fail(exc.message, code=exit_code(exc))
    except KeyboardInterrupt:
        fail("interrupted", code=130)


def with_db(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
    """Open the database, run ``work`` with it and close it: one command's worth of queries."""

    async def go() -> T:
        db = await Database.open(settings)
        try:
            return await work(db)
        finally:
            await db.close()

    return run(go())


def run_sync(fn: Callable[[], T]) -> T:
    """Call a blocking function at the CLI edge with the same error handling as `run`."""
    try:
        return fn()
    except OneboxError as exc:
        fail(exc.message, code=exit_code(exc))


def exit_code(exc: OneboxError) -> int:
    """2 for what the user can fix in their input or configuration, 1 for everything else."""
    return 2 if isinstance(exc, (ValidationError, ConfigError)) else 1


def fail(message: str, *, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    sys.exit(code)


def _default(value: Any) -> Any:
    if isinstance(value, (uuid.UUID, Path)):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(data: Any) -> str:
    return json.dumps(data, default=_default, indent=2, ensure_ascii=False)


def print_json(data: Any) -> None:
    click.echo(dumps(data))


json_option = click.option("--json", "as_json", is_flag=True, help="print one JSON document")
