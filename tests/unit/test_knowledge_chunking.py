"""Chunking: token bounds, overlap, headings, Chinese; loaders produce sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from onebox.errors import ValidationError
from onebox.knowledge.chunking import ChunkingConfig, Section, chunk_sections
from onebox.knowledge.loaders import load_path, markdown_document
from onebox.llm.embedding import estimate_tokens

CONFIG = ChunkingConfig(chunk_tokens=64, max_tokens=96, overlap_tokens=16)


def _english(n: int) -> str:
    return " ".join(f"Sentence {i} talks about leases and fencing tokens." for i in range(n))


def test_small_section_is_kept_verbatim() -> None:
    text = "Title line\n\nA short abstract.  With odd   spacing."
    [chunk] = chunk_sections([Section(None, text)], estimate_tokens, CONFIG)
    assert chunk.content == text


def test_chunks_respect_bounds_and_overlap() -> None:
    chunks = chunk_sections([Section(None, _english(60))], estimate_tokens, CONFIG)
    assert len(chunks) > 3
    assert all(c.n_tokens <= CONFIG.max_tokens for c in chunks)
    assert all(c.content.endswith(".") for c in chunks)  # whole sentences
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        last_sentence = prev.content.rsplit(". ", 1)[-1]
        assert last_sentence in nxt.content  # overlap carries the tail forward


def test_chunks_never_cross_headings() -> None:
    sections = [Section("A", _english(20)), Section("B", "Only B text here.")]
    chunks = chunk_sections(sections, estimate_tokens, CONFIG)
    assert chunks[-1].heading == "B" and chunks[-1].content == "Only B text here."
    assert all("Only B" not in c.content for c in chunks if c.heading == "A")
    assert chunks[-1].embed_text.startswith("B\n")


def test_chinese_is_split_at_sentence_marks_without_spaces() -> None:
    text = "北京是中华人民共和国的首都。" * 30
    chunks = chunk_sections([Section(None, text)], estimate_tokens, CONFIG)
    assert len(chunks) > 1
    for chunk in chunks:
        assert " " not in chunk.content and chunk.content.endswith("。")
        assert chunk.n_tokens <= CONFIG.max_tokens


def test_overlong_sentence_is_cut() -> None:
    chunks = chunk_sections([Section(None, "word " * 500)], estimate_tokens, CONFIG)
    assert len(chunks) >= 5 and all(c.n_tokens <= CONFIG.max_tokens for c in chunks)


def test_config_is_validated() -> None:
    with pytest.raises(ValidationError):
        ChunkingConfig(chunk_tokens=800, max_tokens=768)
    with pytest.raises(ValidationError):
        ChunkingConfig(overlap_tokens=600)


def test_markdown_sections_follow_headings_not_code_fences() -> None:
    doc = markdown_document("# Guide\n\nIntro.\n\n## Setup\n\n```\n# not a heading\n```\n", "x")
    assert doc.title == "Guide"
    assert [s.heading for s in doc.sections] == ["Guide", "Guide > Setup"]
    assert "# not a heading" in doc.sections[1].text


def test_html_and_docx_loaders(tmp_path: Path) -> None:
    import docx

    html = tmp_path / "p.html"
    html.write_text("<html><head><title>T</title><script>x()</script></head><body>"
                    "<h1>One</h1><p>First para.</p><h2>Two</h2><p>Second.</p></body></html>")
    loaded = load_path(html)
    assert loaded.title == "T" and [s.heading for s in loaded.sections] == ["One", "Two"]
    assert "x()" not in loaded.text
    document = docx.Document()
    document.add_heading("Intro", level=1)
    document.add_paragraph("Hello from docx.")
    document.save(str(tmp_path / "d.docx"))
    loaded = load_path(tmp_path / "d.docx")
    assert loaded.source_type == "docx" and loaded.sections[0].heading == "Intro"
    with pytest.raises(ValidationError, match="unsupported"):
        load_path(tmp_path / "x.bin")
