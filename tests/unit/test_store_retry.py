"""The shared retry of transactions PostgreSQL rolled back (deadlock, serialization failure)."""

from __future__ import annotations

import psycopg.errors
import pytest

from onebox.errors import Conflict, StorageError
from onebox.store import retry


async def test_a_deadlock_victim_runs_again_until_it_commits() -> None:
    calls: list[int] = []

    async def transaction() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return "committed"

    assert await retry.retry_rollbacks("test", transaction) == "committed"
    assert len(calls) == 3


async def test_too_many_rollbacks_is_a_storage_error_naming_the_work() -> None:
    async def transaction() -> None:
        raise psycopg.errors.SerializationFailure("could not serialize access")

    with pytest.raises(StorageError, match="cancel of run r1: rolled back .* 3 times") as info:
        await retry.retry_rollbacks("cancel of run r1", transaction, max_tries=3)
    assert isinstance(info.value.__cause__, psycopg.errors.SerializationFailure)


async def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    async def transaction() -> None:
        calls.append(1)
        raise Conflict("run r1 is already CANCELLED")

    with pytest.raises(Conflict):
        await retry.retry_rollbacks("cancel", transaction)
    assert len(calls) == 1


def test_backoff_is_jittered_and_capped() -> None:
    delays = [retry.backoff_s(tries) for tries in range(1, 30)]
    assert all(0.0 <= d < retry.MAX_DELAY_S for d in delays)
    assert len(set(delays)) > 1
