"""A session's create and remove never overlap, however they queue: a remove beside a
create removed a workspace whose uid the create then marked (a leaked uid marker, seen on a
host cut off from the database while its copies were swept)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from onebox.sandbox.sessions import SessionTable


class Hooks:
    """Create and destroy hooks that yield mid-way and record any overlap."""

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0

    async def _busy(self) -> None:
        self.inside += 1
        self.overlaps += self.inside > 1
        await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        self.inside -= 1

    async def create(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        await self._busy()

    async def destroy(self, path: Path) -> None:
        await self._busy()
        if path.exists():
            path.rmdir()


async def test_a_remove_queued_behind_a_remove_never_runs_beside_a_create(tmp_path: Path) -> None:
    hooks = Hooks()
    table = SessionTable(tmp_path, 3600, hooks.create, hooks.destroy)
    session, _ = await table.acquire("s")
    table.release(session)
    first = asyncio.create_task(table.remove("s"))  # holds the lock
    await asyncio.sleep(0)
    create = asyncio.create_task(table.acquire("s"))  # waits on it
    await asyncio.sleep(0.005)
    await first  # ... and a new remove arrives once the first is done
    second = asyncio.create_task(table.remove("s"))
    await asyncio.gather(create, second)
    assert hooks.overlaps == 0
    assert not table._locks, "a lock no one holds or waits for is dropped"


async def test_many_callers_of_one_session_take_turns(tmp_path: Path) -> None:
    hooks = Hooks()
    table = SessionTable(tmp_path, 3600, hooks.create, hooks.destroy)

    async def use() -> None:
        session, _ = await table.acquire("s")
        table.release(session)

    await asyncio.gather(*(coro for _ in range(20) for coro in (use(), table.remove("s"))))
    assert hooks.overlaps == 0
    assert not table._locks
