"""A session the reaper cannot remove is logged with its traceback and the trace context, and
the reaper keeps going: the other idle sessions of the same pass are still reaped, and so is
the failing one once its removal works again."""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import pytest

from onebox.runtime.engine.tracing import LOG_FORMAT, ContextFilter, bound
from onebox.sandbox.sessions import SessionTable

IDLE_S = 0.1
WAIT_S = 10.0  # a bound for a hang, far above the reaper's 50 ms interval


class Undeletable:
    """A destroy hook that fails (as removing a busy mount does) while ``broken`` is set."""

    def __init__(self, broken: str) -> None:
        self.broken: str | None = broken

    async def destroy(self, path: Path) -> None:
        if path.name == self.broken:
            raise PermissionError(13, "Permission denied", str(path))
        shutil.rmtree(path)


async def _create(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


async def _until_gone(path: Path) -> None:
    async with asyncio.timeout(WAIT_S):
        while path.exists():
            await asyncio.sleep(0.02)


async def test_a_failing_removal_is_logged_and_the_reaper_keeps_going(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = Undeletable("stuck")
    table = SessionTable(tmp_path, IDLE_S, _create, hooks.destroy)
    caplog.handler.addFilter(ContextFilter())
    caplog.handler.setFormatter(logging.Formatter(LOG_FORMAT))
    caplog.set_level(logging.INFO, logger="onebox.sandbox.sessions")
    try:
        with bound(trace_id="0af7651916cd43dd8448eb211c80319c"):
            for session_id in ("stuck", "fine"):  # the failing one first in the pass
                session, _ = await table.acquire(session_id)
                table.release(session)
        await _until_gone(tmp_path / "fine")
        failures = [r for r in caplog.records if r.exc_info and "stuck" in r.getMessage()]
        assert failures, [r.getMessage() for r in caplog.records]
        assert isinstance(failures[0].exc_info[1], PermissionError)  # type: ignore[index]
        line = caplog.handler.format(failures[0])
        assert "trace=0af7651916cd43dd8448eb211c80319c" in line and "Traceback" in line
        hooks.broken = None  # the mount went away: a later pass removes it
        await _until_gone(tmp_path / "stuck")
        assert table.ids() == []
    finally:
        await table.close()
