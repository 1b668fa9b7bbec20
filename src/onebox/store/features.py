"""What the connected PostgreSQL can do, and the oldest server onebox accepts.

    features = await read_features(conn)   # after CREATE EXTENSION vector
    if features.iterative_index_scan:       # pgvector >= 0.8: filtered HNSW search
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")

``Database.features`` holds the result for the pool's server; search code reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from onebox.errors import ConfigError

MIN_SERVER_VERSION_NUM = 140000  # PostgreSQL 14: what the SQL needs (the suite runs on 16 and 18)
MIN_PGVECTOR = (0, 6, 0)  # HNSW indexes with parallel builds; 0.8 adds iterative scans
ITERATIVE_SCAN_PGVECTOR = (0, 8, 0)
HALFVEC_PGVECTOR = (0, 7, 0)
UPGRADE_HINT = (
    "Fix: upgrade the server (PostgreSQL {min_pg} or newer with pgvector {min_vec} or newer; "
    "pgvector: ALTER EXTENSION vector UPDATE after installing the new version), "
    "or unset DATABASE_URL to use onebox's embedded PostgreSQL 18 with pgvector 0.8."
)


@dataclass(frozen=True)
class ServerFeatures:
    """The server's versions and the capabilities derived from them."""

    server_version: str
    server_version_num: int
    pgvector_version: str

    @property
    def pgvector(self) -> tuple[int, ...]:
        return parse_version(self.pgvector_version)

    @property
    def iterative_index_scan(self) -> bool:
        """``SET hnsw.iterative_scan`` / ``ivfflat.iterative_scan`` exist (pgvector >= 0.8):
        a filtered HNSW search keeps scanning until it has enough rows that pass the filter."""
        return self.pgvector >= ITERATIVE_SCAN_PGVECTOR

    @property
    def halfvec(self) -> bool:
        return self.pgvector >= HALFVEC_PGVECTOR


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.8.1"`` -> (0, 8, 1); suffixes such as ``-dev`` are ignored."""
    parts = []
    for piece in text.split("."):
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


async def read_features(conn: psycopg.AsyncConnection[Any]) -> ServerFeatures:
    """Read the versions from a connection on which the vector extension is installed."""
    cur = await conn.execute(
        "SELECT current_setting('server_version'), current_setting('server_version_num')::int,"
        " (SELECT extversion FROM pg_extension WHERE extname = 'vector')")
    row = await cur.fetchone()
    assert row is not None
    return ServerFeatures(str(row[0]), int(row[1]), str(row[2] or "0"))


def check_minimum(features: ServerFeatures) -> None:
    """Refuse a server older than onebox supports, naming what to upgrade."""
    hint = UPGRADE_HINT.format(min_pg=MIN_SERVER_VERSION_NUM // 10000,
                               min_vec=".".join(map(str, MIN_PGVECTOR)))
    if features.server_version_num < MIN_SERVER_VERSION_NUM:
        raise ConfigError(
            f"PostgreSQL {features.server_version} is older than onebox supports "
            f"({MIN_SERVER_VERSION_NUM // 10000}). {hint}")
    if features.pgvector < MIN_PGVECTOR:
        raise ConfigError(
            f"pgvector {features.pgvector_version} is older than onebox supports "
            f"({'.'.join(map(str, MIN_PGVECTOR))}). {hint}")
