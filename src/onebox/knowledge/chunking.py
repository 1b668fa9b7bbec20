"""Token-based chunking that respects headings and sentences.

A document is a list of :class:`Section` (a heading path and its text). Chunks
never cross a section boundary. Inside a section, whole sentences are packed
until ``chunk_tokens``; a chunk may grow up to ``max_tokens`` to swallow a
short tail, and each new chunk starts with the last sentences of the previous
one, up to ``overlap_tokens``. A sentence longer than ``max_tokens`` is cut at
word boundaries (character boundaries for CJK). Because packing restarts at
every heading, editing one section leaves the chunks of the others unchanged,
which is what makes re-indexing incremental.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from onebox.errors import ValidationError
from onebox.knowledge.text import CJK, split_sentences

TokenCounter = Callable[[str], int]
_CJK_CHAR = re.compile(f"[{CJK}\u3000-\u303f\uff00-\uffef]")
_PIECE = re.compile(f"[{CJK}]|\\S+\\s*")


@dataclass(frozen=True)
class Section:
    heading: str | None
    text: str


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    content: str
    heading: str | None
    n_tokens: int

    @property
    def embed_text(self) -> str:
        """What gets embedded: the heading path gives the chunk its context."""
        return f"{self.heading}\n{self.content}" if self.heading else self.content


@dataclass(frozen=True)
class ChunkingConfig:
    chunk_tokens: int = 512
    max_tokens: int = 768
    overlap_tokens: int = 128

    def __post_init__(self) -> None:
        if not 16 <= self.chunk_tokens <= self.max_tokens:
            raise ValidationError("need 16 <= chunk_tokens <= max_tokens", field="chunk_tokens")
        if not 0 <= self.overlap_tokens < self.chunk_tokens:
            raise ValidationError("need 0 <= overlap_tokens < chunk_tokens", field="overlap_tokens")


def join_pieces(pieces: list[str]) -> str:
    """Join sentences: no space between two CJK sentences, one space otherwise."""
    out = ""
    for piece in pieces:
        glue = "" if not out or (_CJK_CHAR.match(out[-1]) and _CJK_CHAR.match(piece[0])) else " "
        out += glue + piece
    return out


def chunk_sections(
    sections: list[Section], count: TokenCounter, config: ChunkingConfig | None = None
) -> list[Chunk]:
    config = config or ChunkingConfig()
    chunks: list[Chunk] = []
    for section in sections:
        for content, n_tokens in _chunk_text(section.text, count, config):
            chunks.append(Chunk(len(chunks), content, section.heading, n_tokens))
    return chunks


def _chunk_text(text: str, count: TokenCounter, config: ChunkingConfig) -> list[tuple[str, int]]:
    text = text.strip()
    if not text:
        return []
    whole = count(text)
    if whole <= config.max_tokens:
        return [(text, whole)]
    units: list[tuple[str, int]] = []
    for sentence in split_sentences(text):
        units.extend(_split_long(sentence, count, config.max_tokens, config.chunk_tokens))
    return _pack(units, config)


def _pack(units: list[tuple[str, int]], config: ChunkingConfig) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    current: list[tuple[str, int]] = []
    size = 0
    for index, (piece, n) in enumerate(units):
        if current and size + n > config.chunk_tokens:
            rest = sum(u[1] for u in units[index:])
            if size + rest <= config.max_tokens:  # a short tail joins this chunk
                current.extend(units[index:])
                size += rest
                break
            out.append((join_pieces([p for p, _ in current]), size))
            current = _overlap(current, config.overlap_tokens)
            size = sum(u[1] for u in current)
        current.append((piece, n))
        size += n
    if current:
        out.append((join_pieces([p for p, _ in current]), size))
    return out


def _overlap(previous: list[tuple[str, int]], budget: int) -> list[tuple[str, int]]:
    kept: list[tuple[str, int]] = []
    used = 0
    for piece, n in reversed(previous[1:]):  # never carry the whole previous chunk
        if used + n > budget:
            break
        kept.insert(0, (piece, n))
        used += n
    return kept


def _split_long(
    sentence: str, count: TokenCounter, max_tokens: int, limit: int
) -> list[tuple[str, int]]:
    n = count(sentence)
    if n <= max_tokens:
        return [(sentence, n)]
    parts: list[tuple[str, int]] = []
    buf, size = "", 0
    for match in _PIECE.finditer(sentence):
        piece = match.group(0)
        n_piece = max(1, count(piece))
        if buf and size + n_piece > limit:
            parts.append((buf.strip(), size))
            buf, size = "", 0
        buf += piece
        size += n_piece
    if buf.strip():
        parts.append((buf.strip(), size))
    return parts
