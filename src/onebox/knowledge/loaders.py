"""Read files into sections: text, Markdown, HTML, PDF, DOCX and source code.

``load_path(path)`` returns a :class:`LoadedDocument` (title, source type,
sections) or raises ValidationError naming the file when it cannot be read. It parses
in this process: use it for trusted files only. Untrusted bytes (uploads, ``kb add``,
files a step declares) go through :func:`onebox.knowledge.docparse.parse_document`,
which parses PDF, DOCX and HTML in a sandbox with the same extractors
(:mod:`onebox.knowledge.parse_child`). Text, code and Markdown are parsed in linear time.
``iter_files`` expands folders, skipping hidden entries and unknown types, and names each
file as it is stored (``source_name``): never where it lies on the host.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from onebox.errors import ValidationError
from onebox.knowledge.chunking import Section
from onebox.knowledge.parse_child import Extracted, extract_docx, extract_html, extract_pdf

# Linear: the closing hashes are stripped in Python (a lazy group followed by
# ``\s*#*\s*$`` backtracks in cubic time on a long line of spaces).
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SUFFIXES = {
    ".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".c", ".h", ".cc", ".cpp",
    ".hpp", ".rb", ".php", ".sh", ".sql", ".kt", ".swift", ".scala", ".cs", ".lua", ".r",
    ".toml", ".yaml", ".yml", ".json",
}
TEXT_SUFFIXES = {".txt", ".text", ".rst", ".log", ".csv", ""}
SOURCE_TYPES = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html",
                ".pdf": "pdf", ".docx": "docx"}


@dataclass(frozen=True)
class LoadedDocument:
    title: str
    source_type: str
    sections: list[Section]
    metadata: dict[str, object] = field(default_factory=dict)
    original: str | None = None  # the file's text as read (text, code, Markdown)

    @property
    def text(self) -> str:
        return "\n\n".join(f"{s.heading or ''}\n{s.text}" for s in self.sections)


def source_type_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix in SOURCE_TYPES:
        return SOURCE_TYPES[suffix]
    if suffix in CODE_SUFFIXES:
        return "code"
    if suffix in TEXT_SUFFIXES:
        return "text"
    return None


def iter_files(paths: list[Path]) -> Iterator[tuple[Path, str]]:
    """Each file to ingest with its source name (``source_name``)."""
    for path in paths:
        if not path.exists():
            raise ValidationError(f"{path} does not exist", field="path")
        if path.is_file():
            yield path, source_name(path)
            continue
        for child in sorted(path.rglob("*")):
            rel = child.relative_to(path)
            hidden = any(p.startswith(".") for p in rel.parts)
            if child.is_file() and not hidden and source_type_of(child) is not None:
                yield child, source_name(child, path)


def source_name(path: Path, folder: Path | None = None) -> str:
    """The name a file added from the host is stored, listed and shown under: its file name,
    or for a file found in a folder given, its path from that folder's name
    (``notes/2026/a.md`` for ``kb add ~/notes``). The rest of the host path is kept nowhere:
    the tenant's API, its runs and its model see the name only."""
    if folder is None:
        return path.name
    return (Path(folder.resolve().name) / path.relative_to(folder)).as_posix()


def load_path(path: Path) -> LoadedDocument:
    kind = source_type_of(path)
    if kind is None:
        raise ValidationError(
            f"{path}: unsupported file type {path.suffix!r}; supported: text, Markdown, "
            "HTML, PDF, DOCX and source code", field="path")
    try:
        if kind == "pdf":
            return _load_pdf(path)
        if kind == "docx":
            return from_extracted(extract_docx(path.read_bytes(), path.stem), "docx")
        raw = path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{path}: cannot read it ({exc})", field="path") from exc
    if kind == "html":
        return html_document(raw, path.stem)
    return text_document(raw, path.name, kind)


def text_document(raw: str, name: str, kind: str) -> LoadedDocument:
    """A text, code or Markdown file's document (linear in its size)."""
    if kind == "markdown":
        doc = markdown_document(raw, name.rsplit(".", 1)[0] if "." in name else name)
        return dataclasses.replace(doc, original=raw)
    return LoadedDocument(name, kind, [Section(name if kind == "code" else None, raw)],
                          original=raw)


def from_extracted(extracted: Extracted, kind: str) -> LoadedDocument:
    """A document from an extractor's (or the parser sandbox's) JSON-shaped result."""
    sections = [Section(heading, text) for heading, text in extracted["sections"]]
    return LoadedDocument(extracted["title"], kind, sections, dict(extracted["metadata"]))


def markdown_document(raw: str, default_title: str) -> LoadedDocument:
    sections: list[Section] = []
    path: list[str] = []
    lines: list[str] = []
    in_fence = False
    title = default_title
    for line in raw.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        match = None if in_fence else _MD_HEADING.match(line)
        if match is None:
            lines.append(line)
            continue
        sections.append(Section(" > ".join(path) or None, "\n".join(lines)))
        level, text = len(match.group(1)), match.group(2).rstrip().rstrip("#").rstrip()
        path = path[: level - 1] + [text]
        if level == 1 and title == default_title:
            title = text
        lines = []
    sections.append(Section(" > ".join(path) or None, "\n".join(lines)))
    return LoadedDocument(title, "markdown", [s for s in sections if s.text.strip()])


def html_document(raw: str, default_title: str) -> LoadedDocument:
    return from_extracted(extract_html(raw.encode("utf-8", "surrogatepass"), default_title),
                          "html")


def _load_pdf(path: Path) -> LoadedDocument:
    from pypdf.errors import PdfReadError

    try:
        return from_extracted(extract_pdf(path.read_bytes(), path.stem), "pdf")
    except PdfReadError as exc:
        raise ValidationError(f"{path}: not a readable PDF ({exc})", field="path") from exc
