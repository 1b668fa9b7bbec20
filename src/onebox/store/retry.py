"""Retrying a transaction that PostgreSQL rolled back to break a deadlock or a conflict.

A deadlock (SQLSTATE 40P01) or a serialization failure (40001) says nothing about the
work: the server picked this transaction as the victim and rolled all of it back, so
running it again from the start is safe. Every path that changes a run and its attempts
(claim, cancel, archive, lease recovery) goes through :func:`retry_rollbacks`, so both
sides of a race retry, not only one (see ``onebox.runtime.engine.queue`` for the lock order
that makes a retry rare).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg.errors

from onebox.errors import StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_TRIES = 6
BASE_DELAY_S = 0.005
MAX_DELAY_S = 0.5
RETRYABLE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


async def retry_rollbacks(
    what: str, transaction: Callable[[], Awaitable[T]], *, max_tries: int = MAX_TRIES
) -> T:
    """Run ``transaction`` (a callable that opens and commits its own transaction) and run
    it again after a deadlock or serialization failure, with jittered exponential backoff.

    After ``max_tries`` rollbacks in a row it raises StorageError (the cause kept).
    """
    for tries in range(1, max_tries + 1):
        try:
            return await transaction()
        except RETRYABLE as exc:
            if tries == max_tries:
                raise StorageError(
                    f"{what}: rolled back by the database {tries} times in a row "
                    f"({exc.sqlstate}: {type(exc).__name__}); try again") from exc
            delay_s = backoff_s(tries)
            log.info("%s: rolled back (%s, %s); retry %d in %.3f s",
                     what, exc.sqlstate, type(exc).__name__, tries, delay_s)
            await asyncio.sleep(delay_s)
    raise AssertionError("unreachable")  # pragma: no cover


def backoff_s(tries: int) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**tries)), so two victims of the same
    deadlock do not collide again in lockstep."""
    return random.uniform(0.0, min(MAX_DELAY_S, BASE_DELAY_S * 2 ** tries))
