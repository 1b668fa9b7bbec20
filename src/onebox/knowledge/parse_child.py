"""Text out of PDF, DOCX and HTML; run inside the document sandbox as a script:

    python -I -B parse_child.py KIND TITLE MAX_BYTES  < document  > {"title", "sections", ...}

It imports nothing from onebox, so the sandbox binds this one file and the Python
environment, and importing it costs only the parser libraries. The extractors are also
what :mod:`onebox.knowledge.loaders` uses for trusted local files, so both give the
same text. Any failure of a parser is a verdict on the document: one JSON object with
an ``error`` field, never a traceback.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable
from typing import Any

Extracted = dict[str, Any]
ERROR_CHARS = 300


def extract_html(data: bytes, default_title: str) -> Extracted:
    import lxml.html

    raw = data.decode("utf-8", errors="replace")
    root = lxml.html.fromstring(raw or "<html></html>")
    for bad in root.xpath("//script|//style|//noscript|//nav|//footer"):
        bad.drop_tree()
    title = (root.findtext(".//title") or default_title).strip()
    sections: list[list[Any]] = []
    heading: str | None = None
    parts: list[str] = []
    body = root.find("body")
    for el in (body if body is not None else root).iter():
        tag = el.tag if isinstance(el.tag, str) else ""
        if re.fullmatch(r"h[1-6]", tag):
            sections.append([heading, "\n".join(parts)])
            heading, parts = el.text_content().strip(), []
        elif tag in {"p", "li", "pre", "td", "blockquote", "dd", "dt"}:
            parts.append(el.text_content().strip())
    sections.append([heading, "\n\n".join(parts)])
    if not any(text.strip() for _, text in sections):
        sections = [[None, root.text_content()]]
    return {"title": title, "sections": _non_empty(sections), "metadata": {}}


def extract_pdf(data: bytes, default_title: str) -> Extracted:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    pages = [page.extract_text() or "" for page in reader.pages]
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    meta = reader.metadata
    title = str(meta.title) if meta is not None and meta.title else default_title
    return {"title": title, "sections": [[None, text]], "metadata": {"pages": len(pages)}}


def extract_docx(data: bytes, default_title: str) -> Extracted:
    import docx

    document = docx.Document(io.BytesIO(data))
    sections: list[list[Any]] = []
    heading: str | None = None
    parts: list[str] = []
    for para in document.paragraphs:
        style = para.style.name if para.style is not None else ""
        if style.startswith("Heading") or style == "Title":
            sections.append([heading, "\n\n".join(parts)])
            heading, parts = para.text.strip(), []
        elif para.text.strip():
            parts.append(para.text.strip())
    sections.append([heading, "\n\n".join(parts)])
    title = document.core_properties.title or default_title
    return {"title": title, "sections": _non_empty(sections), "metadata": {}}


def _non_empty(sections: list[list[Any]]) -> list[list[Any]]:
    return [s for s in sections if s[1].strip()]


EXTRACTORS: dict[str, Callable[[bytes, str], Extracted]] = {
    "html": extract_html, "pdf": extract_pdf, "docx": extract_docx,
}
NAMES = {"html": "HTML", "pdf": "PDF", "docx": "DOCX"}


def parse(kind: str, data: bytes, title: str) -> Extracted:
    """The document's text, or ``{"error": why}`` when the parser refused or failed on it."""
    try:
        return EXTRACTORS[kind](data, title)
    except MemoryError:
        return {"error": "the parser ran out of memory (an oversized or decompression-bomb "
                         "document)"}
    except RecursionError:
        return {"error": "the document is nested too deeply to parse"}
    # whatever a parser raises, the document is refused and the parent reports why
    except Exception as exc:  # noqa: BLE001  # swallow-ok: returned to the caller as the error
        detail = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        return {"error": f"not a readable {NAMES[kind]} document ({detail})"}


def main(argv: list[str]) -> int:
    kind, title, max_bytes = argv[1], argv[2], int(argv[3])
    data = sys.stdin.buffer.read(max_bytes + 1)
    if len(data) > max_bytes:
        reply: Extracted = {"error": f"the document is larger than {max_bytes} bytes"}
    else:
        reply = parse(kind, data, title)
    sys.stdout.buffer.write(json.dumps(reply, ensure_ascii=False).encode("utf-8", "replace"))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
