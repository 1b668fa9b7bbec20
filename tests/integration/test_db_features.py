"""Database.features reports the server's versions; iterative index scans work where claimed."""

from __future__ import annotations

from onebox.store.db import Database


async def test_features_match_the_server_and_iterative_scan_can_be_set(db: Database) -> None:
    features = db.features
    assert features is not None
    row = await db.fetchone("SELECT current_setting('server_version_num')::int AS num,"
                            " (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS v")
    assert row is not None
    assert (features.server_version_num, features.pgvector_version) == (row["num"], row["v"])
    if features.iterative_index_scan:
        async with db.transaction() as conn:
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cur = await conn.execute("SHOW hnsw.iterative_scan")
            assert (await cur.fetchone())["hnsw.iterative_scan"] == "relaxed_order"  # type: ignore[index]
