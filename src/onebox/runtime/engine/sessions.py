"""Sandbox sessions as the database sees them: touched when used, released when their run ends.

A run that finished (SUCCEEDED, FAILED, CANCELLED, DEAD) releases its sessions;
a run that is interrupted or waiting keeps them, so its workspace survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from onebox.errors import OneboxError
from onebox.sandbox.base import SandboxBackend
from onebox.store import runs as store
from onebox.store.db import Database

if TYPE_CHECKING:
    from onebox.runtime.engine.workspaces import StepWorkspace

log = logging.getLogger(__name__)


async def touch_session(conn: store.Conn, session_id: str, run_id: uuid.UUID, backend: str) -> None:
    await store.execute(conn, "upsert_session", {"id": session_id, "run_id": run_id, "backend": backend})


async def release_finished_sessions(
    db: Database, backend: SandboxBackend, *, run_id: uuid.UUID | None = None,
    keep: StepWorkspace | None = None, wait_s: float = 0.0,
) -> int:
    """Clean up the sandboxes of finished runs; returns how many sessions were released.
    With ``keep``, each run's outputs are copied to its object store first. A copy another
    pass (or a late step) of this host is using is left for the next pass, or, within
    ``wait_s``, waited for (the worker that ends a run returns once it is released)."""
    async with db.connection() as conn:
        sessions = await store.fetch_all(conn, "finished_sessions", {"run_id": run_id})
    released = 0
    for s in sessions:
        async with _alone(keep, s["id"], wait_s) as free:
            if not free:
                continue  # a step of this host still uses the copy: the next pass releases it
            if keep is not None:
                await keep.keep_outputs(s)
            await backend.cleanup(s["id"])
            if keep is not None:
                keep.forget(s["id"])
        async with db.transaction() as conn:
            if await store.fetch_one(conn, "release_session", {"id": s["id"]}) is None:
                continue
            await store.append_event(conn, s["run_id"], "session_released", {"session_id": s["id"]},
                                     trace_id=s["trace_id"], session_id=s["id"])
        released += 1
    return released


async def reclaim_abandoned(db: Database, backend: SandboxBackend) -> list[str]:
    """End the sessions local processes made for themselves and died before ending (a
    ``kill -9``-ed `onebox exec`): workspace unmounted and removed with its disk image, its
    uid freed, the row released. Only when the owner is provably gone from this host and
    sandbox dir (``backend.local_owner_gone``); a live one's are never touched. Returns
    the session ids reclaimed."""
    async with db.connection() as conn:
        owned = await store.fetch_all(conn, "owned_sessions", {})
    reclaimed = []
    for row in owned:
        if not await asyncio.to_thread(backend.local_owner_gone, str(row["owner"])):
            continue
        try:
            await backend.cleanup(row["id"])
        except (OSError, OneboxError) as exc:  # one stuck workspace must not keep the rest
            log.warning("could not reclaim session %s of dead process %s: %s (the next "
                        "sweep retries)", row["id"], row["owner"], exc)
            continue
        async with db.connection() as conn:
            if await store.fetch_one(conn, "release_session", {"id": row["id"]}) is not None:
                reclaimed.append(str(row["id"]))
    if reclaimed:
        log.info("reclaimed %d sessions whose process died before ending them: %s",
                 len(reclaimed), ", ".join(reclaimed))
    return reclaimed


async def release_copies_left_here(db: Database, backend: SandboxBackend, *,
                                   keep: StepWorkspace | None = None) -> list[str]:
    """Remove this host's copies of run workspaces whose session another host released (a
    run whose steps ran on several hosts is released once, by the host that ran its last
    step; the other hosts' copies would stay). Returns the session ids removed."""
    root = backend.workspace("run-probe").parent
    try:
        here = {p.name for p in root.iterdir() if p.name.startswith("run-")}
    except FileNotFoundError:
        here = set()
    if keep is not None:  # notes a fenced step wrote after its copy was removed
        here.update(keep.noted())
    if not here:
        return []
    async with db.connection() as conn:
        released = [r["id"] for r in await store.fetch_all(conn, "released_of",
                                                              {"ids": sorted(here)})]
    removed = []
    for session_id in released:
        async with _alone(keep, session_id) as free:
            if not free:
                continue  # a (fenced) step of this host still uses it: the next sweep
            await backend.cleanup(session_id)
            if keep is not None:
                keep.forget(session_id)
        removed.append(session_id)
    if removed:
        log.info("removed %d workspace copies of runs released elsewhere", len(removed))
    return removed


@contextlib.asynccontextmanager
async def _alone(keep: StepWorkspace | None, session_id: str,
                 wait_s: float = 0.0) -> AsyncIterator[bool]:
    """Whether this host's copy of the session may be removed now: no step or restore of
    this host uses it (without step workspaces, nothing here shares copies); waited for up
    to ``wait_s``."""
    if keep is None:
        yield True
        return
    deadline = time.monotonic() + wait_s
    while True:
        async with keep.locks.if_free(session_id) as free:
            if free or time.monotonic() >= deadline:
                yield free
                return
        await asyncio.sleep(0.05)
