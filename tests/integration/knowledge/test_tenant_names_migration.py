"""Migration 0022 on rows made the old way by both doors: the CLI's bare names and the API's
'default/...' become one 'default/<name>' (twins merged, the newer document kept), other
tenants' names stay, BM25 statistics match a recount, and a second run changes nothing."""

from __future__ import annotations

from typing import Any

from onebox.knowledge import tenant_service as api_knowledge
from onebox.knowledge.service import Knowledge
from onebox.store.db import Database, migrations

STATE = {
    "collections": "SELECT name FROM onebox.kb_collections ORDER BY name",
    "documents": "SELECT collection, source, title FROM onebox.kb_documents ORDER BY 1, 2",
    "chunks": "SELECT DISTINCT collection FROM onebox.kb_chunks ORDER BY 1",
    "memories": "SELECT scope, content FROM onebox.memories ORDER BY 1, 2",
    "cache": "SELECT scope, question FROM onebox.answer_cache ORDER BY 1",
    "spaces": "SELECT space, n_rows, total_len FROM onebox.fts_spaces WHERE n_rows > 0 "
              "ORDER BY 1",
    "terms": "SELECT space, lexeme, df FROM onebox.fts_terms WHERE df > 0 ORDER BY 1, 2",
}
RECOUNT = """
SELECT 'kb:' || c.collection AS space, lx AS lexeme, count(*) AS df
FROM onebox.kb_chunks c, unnest(tsvector_to_array(c.tsv)) AS lx GROUP BY 1, 2
UNION ALL
SELECT 'mem:' || m.scope, lx, count(*)
FROM onebox.memories m, unnest(tsvector_to_array(m.tsv)) AS lx GROUP BY 1, 2
ORDER BY 1, 2"""


async def _old_rows(kn: Knowledge) -> None:
    """What the CLI (bare names) and the API (prefixed) stored before 0022."""
    await kn.kb.add_text("cli.md", "The boiler is serviced in May.", collection="notes")
    await kn.kb.add_text("both.md", "Old text of the shared source.", collection="default/notes")
    await kn.kb.add_text("both.md", "New text: the vault code is 4711.", collection="notes",
                         title="newer")
    await kn.kb.add_text("api.md", "The API wrote this note.", collection="default/notes")
    await kn.kb.add_text("only-cli.md", "A collection only the CLI had.", collection="cli-only")
    await kn.kb.add_text("acme.md", "Acme's secret plan.", collection="acme/notes")
    await kn.memory.remember("proj", "The deploy key rotates monthly.")
    await kn.memory.remember("default/proj", "Standups are at nine.")
    await kn.memory.remember("acme/proj", "Acme deploys on Fridays.")
    await kn.cache.put("What is the vault code?", "4711")


async def _state(db: Database) -> dict[str, list[Any]]:
    return {name: [tuple(r.values()) for r in await db.fetch(q)] for name, q in STATE.items()}


async def _migrate(db: Database) -> None:
    fix = next(m for m in migrations() if m.version == 22)
    async with db.connection() as conn:
        await conn.execute(fix.sql.encode())


async def test_old_names_from_both_doors_become_one_naming(knowledge: Knowledge) -> None:
    db = knowledge.db
    await _old_rows(knowledge)
    await _migrate(db)
    state = await _state(db)
    assert state["collections"] == [("acme/notes",), ("default/cli-only",), ("default/notes",)]
    assert state["documents"] == [
        ("acme/notes", "acme.md", None), ("default/cli-only", "only-cli.md", None),
        ("default/notes", "api.md", None), ("default/notes", "both.md", "newer"),
        ("default/notes", "cli.md", None)]
    assert state["chunks"] == [(c,) for c in ("acme/notes", "default/cli-only",
                                              "default/notes")]
    assert [s for s, _ in state["memories"]] == ["acme/proj", "default/proj", "default/proj"]
    assert state["cache"] == [("default/default", "What is the vault code?")]
    assert state["terms"] == [tuple(r.values()) for r in await db.fetch(RECOUNT)]
    await _migrate(db)
    assert await _state(db) == state


async def test_after_it_the_api_as_default_finds_what_the_cli_wrote(
        knowledge: Knowledge) -> None:
    await _old_rows(knowledge)
    await _migrate(knowledge.db)
    hits = await api_knowledge.search(knowledge, "default", query="vault code", k=3,
                                      collections=["notes"], metadata=None)
    assert hits[0]["document"]["source"] == "both.md"
    assert hits[0]["document"]["collection"] == "notes"
    recalled = await api_knowledge.recall(knowledge, "default", scope="proj", query="deploy key",
                                          k=5, user_id="", include_superseded=False)
    assert any("deploy key" in m["content"] for m in recalled)
    foreign = await api_knowledge.search(knowledge, "globex", query="vault code", k=3,
                                         collections=None, metadata=None)
    assert foreign == []
