"""Pure text helpers: sentence splitting, CJK segmentation for full-text search, hashing.

PostgreSQL's parser keeps a run of Chinese characters as one "word", so a
Chinese query would only match an identical run. Before indexing (and before
querying) every CJK run is rewritten as overlapping character bigrams
(``中华人民`` -> ``中华 华人 人民``); Latin text is left to the ``english``
configuration (stemming, stop words).
"""

from __future__ import annotations

import re

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{CJK}]+")
_SENTENCE_END = re.compile(
    r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9\u00c0-\u024f" + CJK + "])"  # Latin: end mark + space + capital
    r"|(?<=[。！？；!?])"  # CJK end marks split even without a following space
    r"|\n\s*\n"  # paragraph break
    r"|\n(?=\s*(?:[-*+]\s|\d+[.)]\s))"  # list items
)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*%?")


def cjk_bigrams(run: str) -> str:
    if len(run) == 1:
        return run
    return " ".join(run[i : i + 2] for i in range(len(run) - 1))


def segment_for_fts(text: str) -> str:
    """Text ready for ``to_tsvector('english', ...)``: CJK runs become char bigrams."""
    return _CJK_RUN.sub(lambda m: f" {cjk_bigrams(m.group(0))} ", text)


def split_sentences(text: str) -> list[str]:
    """Sentences (and list items / paragraphs), whitespace-trimmed, none empty.

    Joining the pieces with a space gives back the text up to whitespace.
    """
    pieces = _SENTENCE_END.split(text)
    return [p.strip() for p in pieces if p and p.strip()]


def numbers_in(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def first_sentence(text: str, max_chars: int = 200) -> str:
    """A short extractive summary: the first sentence, cut at ``max_chars``."""
    sentences = split_sentences(text)
    head = sentences[0] if sentences else text.strip()
    return head if len(head) <= max_chars else head[: max_chars - 1].rstrip() + "…"
