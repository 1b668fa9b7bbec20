"""Interpreter results as JSON, and a call's live output as a stream of events.

The shapes every front door shares (HTTP JSON and NDJSON, the SDK, the E2B endpoints):
``cell_json(result)`` and the events of :func:`cell_events`: ``{"type": "stdout" |
"stderr", "text"}`` and ``{"type": "result", "data", "is_main_result"}`` in the order they
happened, then one ``{"type": "end", "result": cell_json(...)}``.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from typing import Any

from onebox.sandbox.base import CellOutput, CellResult, OutputSink

ResultSink = Callable[[CellOutput], None]
CellCall = Callable[[OutputSink, ResultSink], Awaitable[CellResult]]

log = logging.getLogger(__name__)


def output_json(output: CellOutput) -> dict[str, Any]:
    return {"data": dict(output.data), "is_main_result": output.is_main_result}


def cell_json(result: CellResult) -> dict[str, Any]:
    error = result.error
    return {
        "stdout": result.stdout, "stderr": result.stderr,
        "results": [output_json(r) for r in result.results],
        "error": None if error is None else
        {"name": error.name, "value": error.value, "traceback": error.traceback},
        "execution_count": result.execution_count, "duration_ms": result.duration_ms,
        "timed_out": result.timed_out, "state_lost": result.state_lost,
        "restart_reason": result.restart_reason, "memory_peak_mb": result.memory_peak_mb,
        "files_written": [{"path": f.path, "change": f.change, "size": f.size}
                          for f in result.files_written],
        "truncated": result.truncated, "ok": result.ok,
        "blocked_network": [asdict(b) for b in result.blocked_network],
    }  # fmt: skip


async def cell_events(call: CellCall) -> AsyncIterator[dict[str, Any]]:
    """Run ``call`` with sinks that queue events, and yield them as they come."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    decoders = {name: codecs.getincrementaldecoder("utf-8")("replace")
                for name in ("stdout", "stderr")}

    def on_output(stream: str, chunk: bytes) -> None:
        text = decoders[stream].decode(chunk)
        if text:
            queue.put_nowait({"type": stream, "text": text})

    def on_result(output: CellOutput) -> None:
        queue.put_nowait({"type": "result", **output_json(output)})

    task = asyncio.ensure_future(call(on_output, on_result))
    try:
        async for event in _until_done(queue, task):
            yield event
        yield {"type": "end", "result": cell_json(task.result())}
    finally:
        if not task.done():  # the client went away mid-cell: stop the call, keep its cause
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("an interpreter call ended with an error after its client left")


async def _until_done(queue: asyncio.Queue[dict[str, Any]],
                      task: asyncio.Future[CellResult]) -> AsyncIterator[dict[str, Any]]:
    while not (task.done() and queue.empty()):
        getter = asyncio.ensure_future(queue.get())
        waiting: set[asyncio.Future[Any]] = {getter, task}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            yield getter.result()
        else:
            getter.cancel()
    task.result()  # a failed call raises here (before any "end")
