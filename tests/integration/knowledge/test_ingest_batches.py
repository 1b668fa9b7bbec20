"""Ingestion end to end in batches, and re-embedding memories, on the real database."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from onebox.knowledge.embedder import parse_vector
from onebox.knowledge.ingest import IngestProgress
from onebox.knowledge.reembed import reembed_memories
from onebox.knowledge.search import SearchFilters
from onebox.knowledge.service import Knowledge

NOTES = {
    "leases.md": "# Leases\n\nA worker renews its lease every ten seconds through a heartbeat; "
                 "a worker that misses three heartbeats loses its lease.",
    "fencing.md": "# Fencing\n\nEvery lease carries a fencing token. A write that presents a "
                  "stale token is refused, so a paused worker cannot overwrite newer results.",
    "queue.md": "# Queue\n\nRunnable work is claimed with FOR UPDATE SKIP LOCKED in one statement.",
    "backups.md": "# Backups\n\nThe database is dumped every night at two o'clock and kept "
                  "for thirty days in the object store.",
    "长城.md": "# 长城\n\n长城是中国古代的军事防御工程，总长度超过两万公里。",
}


async def test_a_folder_is_embedded_in_batches_and_searchable(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    for name, text in NOTES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    states: list[tuple[int, int]] = []

    def progress(state: IngestProgress) -> None:
        states.append((state.chunks_embedded, state.chunks_total))

    results = await knowledge.kb.add_paths([tmp_path], collection="notes", progress=progress)
    assert len(results) == len(NOTES) and {r.status for r in results} == {"added"}
    assert states[-1][0] == states[-1][1] >= len(NOTES)
    hits = await knowledge.search("what happens to a write with an old fencing token", 3,
                                  SearchFilters(["notes"]))
    assert hits and hits[0].document["source"].endswith("fencing.md")
    chinese = await knowledge.search("中国古代的防御工程有多长", 1, SearchFilters(["notes"]))
    assert chinese[0].document["source"].endswith("长城.md")


async def test_a_batch_gives_each_text_the_vector_it_gets_alone(
    knowledge: Knowledge,
) -> None:
    texts = list(NOTES.values())
    pooled = np.array(await knowledge.embedder.passages(texts))
    single = np.array([(await knowledge.embedder.model.embed([t], "passage"))[0] for t in texts])
    assert (pooled * single).sum(axis=1).min() >= 0.99


async def test_reembed_rewrites_every_memory_vector(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    made = [await memory.remember("ops", text) for text in (
        "The staging database is called atlas.", "Backups run nightly at two.",
        "Ana's office is in room 12.")]
    ids = [m["id"] for m in made]
    async with knowledge.db.transaction() as conn:  # vectors of another model
        await conn.execute(
            "UPDATE onebox.memories SET embedding = %(v)s::vector WHERE id = ANY(%(ids)s::uuid[])",
            {"v": "[" + ",".join(["0.05"] * 384) + "]", "ids": ids})
    seen: list[tuple[int, int]] = []
    assert await reembed_memories(knowledge.db, knowledge.embedder,
                                  lambda d, t: seen.append((d, t))) == 3
    assert seen[-1] == (3, 3)
    rows = await knowledge.db.fetch(
        "SELECT content, embedding::text AS e FROM onebox.memories WHERE id = ANY(%(ids)s::uuid[])",
        {"ids": ids})
    for row in rows:
        expected = (await knowledge.embedder.passages([row["content"]]))[0]
        assert float(np.dot(parse_vector(row["e"]), expected)) > 0.999
    recalled = await memory.recall("ops", "what is the staging database called", k=1)
    assert "atlas" in recalled[0].content
