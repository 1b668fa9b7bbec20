"""Live run events for SSE: one poller per process (on its own connection), fanned out to
every subscriber.

Event ``seq`` numbers come from a sequence, so they are allocated in order but
may commit out of order (two transactions, seq 9 committing after seq 10). A
subscriber that read 10 and then resumed "after 10" would never see 9. The hub
therefore only publishes up to a *safe horizon*. Each poll reads the sequence's
last value ``top`` (a candidate) and the database clock just after. A poll at least
``GRACE_S`` later records the transactions running at that moment
(``pg_stat_activity.backend_xid``) that had begun by the candidate's clock (one begun
later cannot have drawn a seq <= ``top``: that leaves out the runs submitted meanwhile).
Every writer that drew a seq <= ``top`` had its transaction id by then (a writer draws
its seq and gets its id within the same INSERT, microseconds apart), so once none
of the recorded transactions is running any more, every event up to ``top`` is
committed or gone for good, and ``top`` becomes the horizon. Subscribers read the
database only up to the horizon, so ``Last-Event-ID`` resumes without gaps or
duplicates. A long transaction anywhere delays publication until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from onebox.runtime.engine import event_log
from onebox.store.db import Database

log = logging.getLogger(__name__)
T = TypeVar("T")
PAGE = 1000
GRACE_S = 0.05  # a writer's nextval precedes its transaction id by microseconds; margin for
# a descheduled backend on a loaded machine
CONFIRM_S = 0.01  # while new events wait for their writers to end: one cheap query per CONFIRM_S
STUCK_S = 1.0  # a candidate older than this waits for a long transaction: back to poll_s
CLOCK_MARGIN_S = 0.01  # a transaction begun this soon after a candidate still counts as its writer


@dataclass
class Candidate:
    top: int  # the sequence's last value when read
    taken: float  # monotonic time of that read
    at_s: float  # the database's clock just after that read (epoch seconds)
    waits_for: frozenset[str] | None = None  # xids running >= GRACE_S after `taken`, begun
    # by at_s (a transaction begun later cannot hold a seq <= top)

    def writers(self, running: dict[str, float]) -> frozenset[str]:
        """Of the transactions running now, those that may hold a seq <= top."""
        return frozenset(xid for xid, began_s in running.items()
                         if began_s <= self.at_s + CLOCK_MARGIN_S)


@dataclass(frozen=True)
class Batch:
    """Every event of one run with lo < seq <= hi (the hub publishes ranges, gap-free)."""

    lo: int
    hi: int
    events: tuple[dict[str, Any], ...]
    read_at: float = 0.0  # monotonic time just after the hub read them


class EventHub:
    def __init__(self, db: Database, poll_s: float = 0.1, idle_poll_s: float = 1.0) -> None:
        self.db = db
        self.poll_s = poll_s
        self.idle_poll_s = idle_poll_s
        self.horizon: int | None = None
        self._candidates: deque[Candidate] = deque(maxlen=256)
        self._subs: dict[uuid.UUID, set[asyncio.Queue[Batch]]] = {}
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[dict[str, Any]] | None = None

    @property
    def subscribers(self) -> int:
        return sum(len(qs) for qs in self._subs.values())

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # _run logs its own failures
                await self._task
            self._task = None
        await self._disconnect()

    async def _read(self, read: Callable[[event_log.Conn], Awaitable[T]]) -> T:
        """``read`` on the hub's own connection: its polls never queue behind requests for a
        pooled connection (20 clients submitting runs keep a pool of 10 busy)."""
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.db.url, autocommit=True, row_factory=dict_row)
        try:
            return await read(self._conn)
        except BaseException:
            await self._disconnect()  # a broken or interrupted connection: a fresh one next time
            raise

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def ready_horizon(self) -> int:
        self.start()
        self._wake.set()
        await self._ready.wait()
        assert self.horizon is not None
        return self.horizon

    def subscribe(self, run_id: uuid.UUID) -> asyncio.Queue[Batch]:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        self._subs.setdefault(run_id, set()).add(queue)
        self.start()
        self._wake.set()
        return queue

    def unsubscribe(self, run_id: uuid.UUID, queue: asyncio.Queue[Batch]) -> None:
        queues = self._subs.get(run_id)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._subs[run_id]

    async def _run(self) -> None:
        while True:
            try:
                await self._tick()
            except Exception:  # the hub must outlive any failure; subscribers wait on it
                log.exception("event hub: a poll failed; retrying in %s s", self.idle_poll_s)
                await asyncio.sleep(self.idle_poll_s)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._delay_s())

    def _delay_s(self) -> float:
        """Until the next poll: right when the oldest fresh candidate's grace ends (to record
        what it waits for), then every CONFIRM_S until those writers end; otherwise poll_s
        while anyone listens and idle_poll_s when nobody does."""
        busy = bool(self._subs) or not self._ready.is_set()
        delay = self.poll_s if busy else self.idle_poll_s
        pending = self._pending()
        if busy and pending is not None:
            if pending.waits_for is None:
                return max(min(delay, pending.taken + GRACE_S - time.monotonic()), 0.0)
            return min(delay, CONFIRM_S)
        return delay

    def _pending(self) -> Candidate | None:
        """The oldest candidate holding events past the horizon, unless it is stuck behind a
        long transaction (polling fast would then only load the database for nothing)."""
        if not self._candidates:
            return None
        oldest = self._candidates[0]
        if time.monotonic() - oldest.taken >= STUCK_S:
            return None
        if self.horizon is not None and self._candidates[-1].top <= self.horizon:
            return None
        return oldest

    async def _tick(self) -> None:
        """Record what older candidates wait for, confirm those whose writers have all ended,
        and take a new candidate."""
        probe = await self._read(event_log.horizon_probe)
        top, running = probe.top, probe.running
        now = time.monotonic()
        for candidate in self._candidates:
            if candidate.waits_for is None and now - candidate.taken >= GRACE_S:
                candidate.waits_for = candidate.writers(running)
        confirmed: int | None = None
        while self._candidates and self._candidates[0].waits_for is not None \
                and not self._candidates[0].waits_for & running.keys():
            confirmed = self._candidates.popleft().top
        if not self._candidates or top > self._candidates[-1].top:
            self._candidates.append(Candidate(top, now, probe.at_s))  # same top: nothing new
        if confirmed is not None and (self.horizon is None or confirmed > self.horizon):
            await self._publish(confirmed)

    async def _publish(self, upto: int) -> None:
        lo = self.horizon
        if lo is None or not self._subs:
            self.horizon = upto
            self._ready.set()
            return
        rows = await self._read(lambda conn: event_log.events_between(conn, lo, upto))
        read_at = time.monotonic()
        by_run: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for row in rows:
            if row["run_id"] is not None:
                by_run.setdefault(row["run_id"], []).append(row)
        self.horizon = upto
        for run_id, queues in self._subs.items():
            batch = Batch(lo, upto, tuple(by_run.get(run_id, ())), read_at)
            for queue in queues:
                if batch.events or queue.empty():  # a slow reader does not pile up empty ranges
                    queue.put_nowait(batch)


@dataclass
class Recheck:
    """Whether the caller may still listen (its API key is not revoked): asked every
    ``every_s`` while the stream is quiet, and again before events read after the last
    yes are delivered (that answer comes from a query made after they were read, so no
    event emitted after a revocation gets through). A stream ends at the first no."""

    allowed: Callable[[], Awaitable[bool]]
    every_s: float
    due: float = 0.0
    checked_at: float = 0.0  # monotonic start of the last check that said yes
    revoked: bool = False

    def __post_init__(self) -> None:
        self.checked_at = time.monotonic()
        self.due = self.checked_at + self.every_s

    async def still_allowed(self, read_at: float | None = None) -> bool:
        """``read_at``: when the events about to be delivered were read (monotonic)."""
        if self.revoked:
            return False
        now = time.monotonic()
        if now < self.due and (read_at is None or read_at < self.checked_at):
            return True
        self.due = now + self.every_s
        if not await self.allowed():
            self.revoked = True
            return False
        self.checked_at = now
        return True


async def _allowed(recheck: Recheck | None, read_at: float | None = None) -> bool:
    return recheck is None or await recheck.still_allowed(read_at)


def run_event_stream(
    hub: EventHub, run_id: uuid.UUID, after: int, heartbeat_s: float,
    recheck: Recheck | None = None,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """Events of one run with seq > ``after``, in order; None is a keep-alive tick, due every
    ``heartbeat_s`` whatever the events do (a wait for the first horizon, a long backfill, a
    slow database, other runs' traffic). Forever, unless ``recheck`` says the caller may no
    longer listen: then the iterator ends, within ``heartbeat_s`` of a revocation."""
    if recheck is not None:
        recheck.every_s = min(recheck.every_s, heartbeat_s)
        recheck.due = min(recheck.due, recheck.checked_at + heartbeat_s)
    return with_keepalives(_run_events(hub, run_id, after, recheck), heartbeat_s)


async def with_keepalives(
    source: AsyncIterator[dict[str, Any]], heartbeat_s: float,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """``source``'s items, with a None at least every ``heartbeat_s``: the timer runs beside
    the source (its next item is awaited in a task), so nothing the source waits for can
    delay a keep-alive, and it is checked after every item, so a busy source cannot either."""
    beat = time.monotonic() + heartbeat_s
    pending: asyncio.Task[dict[str, Any]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.create_task(_next(source))
            await asyncio.wait({pending}, timeout=max(beat - time.monotonic(), 0.0))
            if time.monotonic() >= beat:
                beat = time.monotonic() + heartbeat_s
                yield None
            if pending.done():
                done, pending = pending, None
                try:
                    item = done.result()
                except StopAsyncIteration:
                    return
                yield item
    finally:
        await _stop(pending, source)


async def _next(source: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    return await anext(source)


async def _stop(pending: asyncio.Task[Any] | None, source: AsyncIterator[Any]) -> None:
    """Cancel the item being awaited, then close the source (never while it is running)."""
    if pending is not None:
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await pending
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()


async def _run_events(
    hub: EventHub, run_id: uuid.UUID, after: int, recheck: Recheck | None,
) -> AsyncIterator[dict[str, Any]]:
    """The run's events, gap-free and in order: the backfill up to the horizon, then the
    hub's batches (backfilling any range a slow reader was not queued)."""
    queue = hub.subscribe(run_id)
    try:
        covered = after
        horizon = await hub.ready_horizon()
        async for event in _backfill(hub.db, run_id, covered, horizon, recheck):
            yield event
        covered = max(covered, horizon)
        while await _allowed(recheck):
            batch = await _next_batch(queue, recheck)
            if batch is None or batch.hi <= covered:
                continue
            if batch.lo > covered:
                async for event in _backfill(hub.db, run_id, covered, batch.lo, recheck):
                    yield event
            if batch.events and not await _allowed(recheck, batch.read_at):
                return
            for event in batch.events:
                if event["seq"] > covered:
                    yield event
            covered = batch.hi
    finally:
        hub.unsubscribe(run_id, queue)


async def _next_batch(queue: asyncio.Queue[Batch], recheck: Recheck | None) -> Batch | None:
    """The next batch, or None when the caller's key is due for its re-check first."""
    if recheck is None:
        return await queue.get()
    try:
        return await asyncio.wait_for(queue.get(), max(recheck.due - time.monotonic(), 0.0))
    except TimeoutError:
        return None


async def _backfill(
    db: Database, run_id: uuid.UUID, after: int, upto: int, recheck: Recheck | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The run's events in (after, upto], a page at a time; none once ``recheck`` says no."""
    while after < upto:
        rows = await event_log.run_events_between(db, run_id, after, upto, PAGE)
        if rows and not await _allowed(recheck, time.monotonic()):
            return
        for row in rows:
            yield row
        if len(rows) < PAGE:
            return
        after = rows[-1]["seq"]
