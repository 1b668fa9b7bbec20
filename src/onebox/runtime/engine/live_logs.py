"""Live logs: a running step's stdout and stderr, written as events while it runs.

The sandbox hands every chunk it reads to ``ExecRequest.on_output`` (on the event loop,
never blocking). A :class:`LiveLog` buffers the chunks of one attempt and a flusher task
writes them as ``step_output`` events, coalesced: one write at most every
``live_log_interval_s`` (sooner when 64 KB are waiting), each event at most 64 KB, cut
at a UTF-8 character boundary. Payload: ``execution_id``, ``step_id``, ``stream``,
``text`` (the safe text of the bytes), ``offset`` (the stream's byte offset of the
chunk) and ``bytes`` (its length): per stream, ``offset + bytes`` is the next offset.

At most ``live_log_max_bytes`` per attempt are streamed; past that one
``step_output_truncated`` event says how much was streamed. The archived stdout and
stderr of the attempt are the sandbox's own capture, complete as before: live logs are a
view, best effort (a failed write is logged and the next flush carries on).

    log = LiveLog(db, row, settings.runtime)
    result = await backend.execute(replace(request, on_output=log.feed))
    await log.close()   # the rest, before the step's own event
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from onebox.config import RuntimeSettings
from onebox.sandbox.capture import safe_text, text_view
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.store.queries import load_queries

log = logging.getLogger(__name__)
EVENT_BYTES = 65536  # one step_output event carries at most this many bytes
STREAMS = ("stdout", "stderr")
PAGE = 1000
Q = load_queries("live_logs")


def utf8_cut(data: bytes) -> int:
    """Where ``data`` may be cut so no character is split: its length, or the start of
    an incomplete multi-byte sequence at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # a lead byte: complete when its sequence fits in `back` bytes
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


class LiveLog:
    """The live output of one attempt (one ``task_execution`` row)."""

    def __init__(self, db: Database, row: store.Row, cfg: RuntimeSettings) -> None:
        self.db, self.row = db, row
        self.interval_s, self.max_bytes = cfg.live_log_interval_s, cfg.live_log_max_bytes
        self.pending = {name: bytearray() for name in STREAMS}
        self.offsets = dict.fromkeys(STREAMS, 0)
        self.accepted = 0
        self.dropped = 0
        self.truncation_sent = False
        self._ready, self._full = asyncio.Event(), asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def feed(self, stream: str, chunk: bytes) -> None:
        """The sandbox's callback: keep what fits under the cap, wake the flusher."""
        if self._closing or stream not in self.pending:
            return
        room = self.max_bytes - self.accepted
        kept = chunk[: max(room, 0)]
        self.dropped += len(chunk) - len(kept)
        if kept:
            self.accepted += len(kept)
            self.pending[stream] += kept
            if len(self.pending[stream]) >= EVENT_BYTES:
                self._full.set()
        self._ready.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flusher())

    async def close(self) -> None:
        """Write what is left (all of it, a split character too) and stop the flusher."""
        self._closing = True
        if self._task is not None:
            self._ready.set()
            self._full.set()
            await asyncio.wait({self._task})  # a cancel of the caller still propagates

    async def _flusher(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            final = self._closing
            await self._flush(final=final)
            if final:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self.interval_s)
            self._full.clear()

    async def _flush(self, *, final: bool) -> None:
        events = [e for name in STREAMS for e in self._take(name, final=final)]
        if self.dropped and not self.truncation_sent and (final or not any(self.pending.values())):
            self.truncation_sent = True
            events.append(("step_output_truncated", self._truncated()))
        if not events:
            return
        try:
            async with self.db.transaction() as conn:
                for kind, payload in events:
                    await store.append_event(
                        conn, self.row["run_id"], kind, payload, trace_id=self.row["trace_id"],
                        session_id=self.row["session_id"], execution_id=self.row["id"])
        except Exception:  # noqa: BLE001 - a view: the archived output is complete
            log.warning("live log of step %s (trace %s) not written", self.row["step_id"],
                        self.row["trace_id"], exc_info=True)

    def _take(self, name: str, *, final: bool) -> list[tuple[str, dict[str, Any]]]:
        """The stream's pending bytes as events of at most EVENT_BYTES, cut between
        characters (a final take also flushes an incomplete one, unless the cap cut it)."""
        buf = self.pending[name]
        events = []
        while buf:
            piece = bytes(buf[:EVENT_BYTES])
            cut = utf8_cut(piece)
            if cut < len(piece) and (len(buf) > EVENT_BYTES or not final or self.dropped):
                piece = piece[:cut]
            if not piece:
                break
            del buf[: len(piece)]
            events.append(("step_output", self._payload(name, piece)))
        return events

    def _payload(self, name: str, piece: bytes) -> dict[str, Any]:
        payload = {"execution_id": str(self.row["id"]), "step_id": self.row["step_id"],
                   "stream": name, "text": safe_text(text_view(piece)),
                   "offset": self.offsets[name], "bytes": len(piece)}
        self.offsets[name] += len(piece)
        return payload

    def _truncated(self) -> dict[str, Any]:
        return {"execution_id": str(self.row["id"]), "step_id": self.row["step_id"],
                "streamed_bytes": sum(self.offsets.values()), "max_bytes": self.max_bytes,
                "message": f"log truncated: {self.max_bytes} bytes streamed, the rest is in "
                           "the step's archived output"}


async def log_events(db: Database, run_id: uuid.UUID, *, after: int = 0,
                     step_id: str | None = None, limit: int = PAGE) -> list[store.Row]:
    """A run's step_output and step_output_truncated events with seq > ``after``, in order
    (of one step when ``step_id`` is given)."""
    return await db.fetch(Q["log_events"], {"run_id": run_id, "after": after,
                                            "step_id": step_id, "limit": limit})


async def log_events_by_attempt(db: Database, run_id: uuid.UUID, *,
                                step_id: str | None = None) -> AsyncGenerator[store.Row, None]:
    """A run's log events (of one step when ``step_id`` is given) grouped by attempt, the
    attempts in step order (time order within a step number), each with its ``step_id`` and
    ``attempt``. Streamed from one query: a big run's logs are not held in memory."""
    async with db.connection() as conn, conn.cursor() as cur:
        async for row in cur.stream(Q["log_events_by_attempt"],
                                    {"run_id": run_id, "step_id": step_id}):
            yield row


async def last_lines(db: Database, run_id: uuid.UUID, execution_ids: list[uuid.UUID],
                     lines: int) -> list[str]:
    """The last ``lines`` lines the given attempts printed so far (both streams)."""
    if not execution_ids or lines <= 0:
        return []
    rows = await db.fetch(Q["recent_output"], {"run_id": run_id,
                                               "execution_ids": execution_ids,
                                               "limit": lines})
    text = "".join(row["payload"]["text"] for row in reversed(rows))
    return text.splitlines()[-lines:]
