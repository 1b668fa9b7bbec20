"""Read files into sections: text, Markdown, HTML, PDF, DOCX and source code.

``load_path(path)`` returns a :class:`LoadedDocument` (title, source type,
sections) or raises ValidationError naming the file when it cannot be read.
``iter_files`` expands folders, skipping hidden entries and unknown types.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from onebox.errors import ValidationError
from onebox.knowledge.chunking import Section

_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
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


def iter_files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if not path.exists():
            raise ValidationError(f"{path} does not exist", field="path")
        if path.is_file():
            yield path
            continue
        for child in sorted(path.rglob("*")):
            rel = child.relative_to(path)
            hidden = any(p.startswith(".") for p in rel.parts)
            if child.is_file() and not hidden and source_type_of(child) is not None:
                yield child


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
            return _load_docx(path)
        raw = path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{path}: cannot read it ({exc})", field="path") from exc
    if kind == "markdown":
        return markdown_document(raw, path.stem)
    if kind == "html":
        return html_document(raw, path.stem)
    return LoadedDocument(path.name, kind, [Section(path.name if kind == "code" else None, raw)])


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
        level, text = len(match.group(1)), match.group(2)
        path = path[: level - 1] + [text]
        if level == 1 and title == default_title:
            title = text
        lines = []
    sections.append(Section(" > ".join(path) or None, "\n".join(lines)))
    return LoadedDocument(title, "markdown", [s for s in sections if s.text.strip()])


def html_document(raw: str, default_title: str) -> LoadedDocument:
    import lxml.html

    root = lxml.html.fromstring(raw or "<html></html>")
    for bad in root.xpath("//script|//style|//noscript|//nav|//footer"):
        bad.drop_tree()
    title = (root.findtext(".//title") or default_title).strip()
    sections: list[Section] = []
    heading: str | None = None
    parts: list[str] = []
    body = root.find("body")
    for el in (body if body is not None else root).iter():
        tag = el.tag if isinstance(el.tag, str) else ""
        if re.fullmatch(r"h[1-6]", tag):
            sections.append(Section(heading, "\n".join(parts)))
            heading, parts = el.text_content().strip(), []
        elif tag in {"p", "li", "pre", "td", "blockquote", "dd", "dt"}:
            parts.append(el.text_content().strip())
    sections.append(Section(heading, "\n\n".join(parts)))
    if not any(s.text.strip() for s in sections):
        sections = [Section(None, root.text_content())]
    return LoadedDocument(title, "html", [s for s in sections if s.text.strip()])


def _load_pdf(path: Path) -> LoadedDocument:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        pages = [page.extract_text() or "" for page in reader.pages]
    except PdfReadError as exc:
        raise ValidationError(f"{path}: not a readable PDF ({exc})", field="path") from exc
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    meta = reader.metadata
    title = str(meta.title) if meta is not None and meta.title else path.stem
    return LoadedDocument(title, "pdf", [Section(None, text)], {"pages": len(pages)})


def _load_docx(path: Path) -> LoadedDocument:
    import docx

    document = docx.Document(str(path))
    sections: list[Section] = []
    heading: str | None = None
    parts: list[str] = []
    for para in document.paragraphs:
        style = para.style.name if para.style is not None else ""
        if style.startswith("Heading") or style == "Title":
            sections.append(Section(heading, "\n\n".join(parts)))
            heading, parts = para.text.strip(), []
        elif para.text.strip():
            parts.append(para.text.strip())
    sections.append(Section(heading, "\n\n".join(parts)))
    title = document.core_properties.title or path.stem
    return LoadedDocument(title, "docx", [s for s in sections if s.text.strip()])
