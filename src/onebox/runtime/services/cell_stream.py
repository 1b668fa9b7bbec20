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
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from typing import Any

from onebox.sandbox.base import CellOutput, CellResult, OutputSink

ResultSink = Callable[[CellOutput], None]
CellCall = Callable[[OutputSink, ResultSink], Awaitable[CellResult]]

log = logging.getLogger(__name__)
PARTIAL_LINE_S = 0.2  # a partial printed line waits this long for its end
LINE = re.compile(r"[^\n]*\n|[^\n]+")


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


async def by_lines(events: AsyncIterator[dict[str, Any]], partial_s: float = PARTIAL_LINE_S,
                   *, split: bool = True) -> AsyncIterator[dict[str, Any]]:
    """``events`` with printed text regrouped into whole lines: the pipes deliver whatever
    one read got (``print`` writes the text and its newline separately), and a reader's
    callback should not get half a line. With ``split`` each line is its own event (E2B
    clients expect one message a line); without it, the whole lines of one read stay one
    event. A partial line goes out after ``partial_s`` without more output (a progress bar
    still shows), and before any other event."""
    pending: dict[str, str] = {}
    source = aiter(events)
    waiting: asyncio.Task[dict[str, Any]] | None = None
    try:
        while True:
            waiting = waiting or asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({waiting}, timeout=partial_s if pending else None)
            if not done:
                for out in _drain(pending):
                    yield out
                continue
            task, waiting = waiting, None
            try:
                event = task.result()
            except StopAsyncIteration:
                break
            for out in _regroup(pending, event, split):
                yield out
        for out in _drain(pending):
            yield out
    finally:
        if waiting is not None:
            waiting.cancel()


def _regroup(pending: dict[str, str], event: dict[str, Any],
             split: bool = True) -> list[dict[str, Any]]:
    """The event's whole lines; its unfinished last line waits in ``pending``. Anything
    else (a result, the end, the other stream) sends the waiting text first."""
    kind = event["type"]
    if kind not in ("stdout", "stderr"):
        return [*_drain(pending), event]
    text = pending.pop(kind, "") + event["text"]
    out = _drain(pending)  # the other stream's partial line printed before this
    lines = LINE.findall(text)
    if lines and not lines[-1].endswith("\n"):
        pending[kind] = lines.pop()
    if not split and lines:
        lines = ["".join(lines)]
    return out + [{**event, "text": line} for line in lines]


def _drain(pending: dict[str, str]) -> list[dict[str, Any]]:
    out = [{"type": kind, "text": text} for kind, text in pending.items()]
    pending.clear()
    return out
