"""Documents keep their original text (migration 0016) and are read back whole by id, source
or path suffix, with bounds and clear errors (real database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onebox.errors import Conflict, NotFound, ValidationError
from onebox.knowledge.chunking import Section
from onebox.knowledge.documents import read_document
from onebox.knowledge.ingest import DocumentInput
from onebox.knowledge.service import Knowledge

CSV = "day,amount\n" + "".join(f"2026-01-{1 + i % 28:02d},{i * 3}\n" for i in range(400))


async def test_a_csv_is_read_back_exactly_though_its_chunks_overlap(
        hash_knowledge: Knowledge) -> None:
    stored = await hash_knowledge.kb.add_text("/srv/data/sales.csv", CSV, collection="c")
    chunks = await hash_knowledge.db.fetch(
        "SELECT content FROM onebox.kb_chunks WHERE document_id = %s", (stored.document_id,))
    assert len(chunks) > 1 and "".join(c["content"] for c in chunks) != CSV  # overlapping
    for name in (stored.document_id, "/srv/data/sales.csv", "sales.csv", "data/sales.csv"):
        doc = await read_document(hash_knowledge.db, name, ["c"])
        assert doc.text == CSV and doc.id == stored.document_id
    assert doc.to_dict()["bytes"] == len(CSV.encode()) and doc.source_type == "text"


async def test_a_markdown_file_keeps_its_headings(hash_knowledge: Knowledge,
                                                  tmp_path: Path) -> None:
    raw = "# Runbook\n\nRestart the worker.\n\n## Leases\n\nRenew every 10 s.\n"
    (tmp_path / "runbook.md").write_text(raw)
    await hash_knowledge.kb.add_paths([tmp_path / "runbook.md"], collection="c")
    assert (await read_document(hash_knowledge.db, "runbook.md", ["c"])).text == raw


async def test_a_document_stored_before_0016_says_how_to_re_ingest_and_re_adding_fixes_it(
        hash_knowledge: Knowledge) -> None:
    doc = DocumentInput("old.txt", [Section(None, "an old note")], collection="c")
    stored = await hash_knowledge.kb.add_document(doc)
    await hash_knowledge.db.fetch("UPDATE onebox.kb_documents SET text = NULL, text_bytes = NULL"
                                  " RETURNING id")
    with pytest.raises(Conflict) as caught:
        await read_document(hash_knowledge.db, "old.txt", ["c"])
    assert "old.txt" in caught.value.message and stored.document_id in caught.value.message
    assert "onebox kb add" in caught.value.message and caught.value.field == "document"
    again = await hash_knowledge.kb.add_document(doc)
    assert again.status == "unchanged"
    assert (await read_document(hash_knowledge.db, "old.txt", ["c"])).text == "an old note"


async def test_bounds_and_ambiguity_are_clear_errors(hash_knowledge: Knowledge) -> None:
    kb = hash_knowledge.kb
    await kb.add_text("/a/notes.txt", "x" * 5000, collection="c")
    await kb.add_text("/b/notes.txt", "y", collection="c")
    with pytest.raises(ValidationError) as many:
        await read_document(hash_knowledge.db, "notes.txt", ["c"])
    assert "/a/notes.txt" in many.value.message and "/b/notes.txt" in many.value.message
    with pytest.raises(ValidationError) as large:
        await read_document(hash_knowledge.db, "/a/notes.txt", ["c"], max_bytes=1000)
    assert "5000 bytes" in large.value.message and large.value.field == "max_bytes"
    with pytest.raises(ValidationError):
        await read_document(hash_knowledge.db, "/a/notes.txt", ["c"], max_bytes=5 << 20)
    with pytest.raises(NotFound):
        await read_document(hash_knowledge.db, "/a/notes.txt", ["other"])
    with pytest.raises(ValidationError):
        await read_document(hash_knowledge.db, " ", ["c"])


async def test_ingest_refuses_a_text_over_the_parse_cap(hash_knowledge: Knowledge) -> None:
    from onebox.knowledge.docparse import ParseLimits

    kb = hash_knowledge.kb
    kb.parse_limits = ParseLimits(max_bytes=2048)
    with pytest.raises(ValidationError) as caught:
        await kb.add_text("big.txt", "z" * 4096, collection="c")
    assert "knowledge.parse_max_bytes" in caught.value.message


async def test_search_hits_name_their_document(hash_knowledge: Knowledge) -> None:
    stored = await hash_knowledge.kb.add_text("s.txt", "leases renew every ten seconds",
                                              collection="c")
    hits = await hash_knowledge.search("leases", k=1)
    assert hits[0].to_dict()["document_id"] == stored.document_id
