"""Which knowledge documents an answer saw only in parts.

A ``knowledge_search`` step gives chunks: parts of documents, overlapping, a few of many.
An answer computed from them (a sum over a CSV, a count over a report) can look right and
cover a fraction of the document. When the answer depends on search hits of a document
that no step read whole (a ``knowledge_read`` step, or a code step's ``documents``), the
run says so: :func:`excerpts` lists each such document with the chunks seen and its
total, and :func:`excerpt_note` is the line added under the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from onebox.agent.plan import Plan

FIX = ("to compute over a whole document, read it whole (a knowledge_read step, or a code "
       "step's \"documents\"), or give the file to the run with `onebox run --file`")


def answer_steps(plan: Plan, finished: Iterable[str]) -> set[str]:
    """The steps the answer came from: the last finished ``final`` step and every step it
    depends on, transitively; without a final step, every finished step."""
    done = set(finished)
    finals = [s.id for s in plan.steps if s.kind == "final" and s.id in done]
    if not finals:
        return done
    seen, todo = set(), [finals[-1]]
    while todo:
        sid = todo.pop()
        if sid not in seen:
            seen.add(sid)
            todo.extend(plan.step(sid).depends_on)
    return seen


def excerpts(plan: Plan, outputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per document the answer saw only through search hits:
    ``{"document_id", "source", "chunks_seen", "chunks_total"}`` (total None if unknown)."""
    used = answer_steps(plan, outputs)
    seen: dict[str, dict[str, Any]] = {}
    chunks: dict[str, set[Any]] = {}
    whole: set[str] = set()
    for step in plan.steps:
        if step.id not in used:
            continue
        result = (outputs.get(step.id) or {}).get("result")
        if step.kind == "knowledge_search":
            for hit in _hits(result):
                _count(seen, chunks, hit)
        elif step.kind == "knowledge_read":
            whole.update(str(r.get("document_id")) for r in _dicts(result))
        whole.update(step.documents)
    return [e for e in seen.values() if not _read_whole(e, whole)]


def excerpt_note(found: list[dict[str, Any]]) -> str:
    """The line under an answer drawn from excerpts."""
    parts = []
    for e in found:
        name = str(e["source"]).rstrip("/").rsplit("/", 1)[-1] or e["document_id"]
        total = e["chunks_total"]
        of = f" of {total}" if total is not None else ""
        parts.append(f"{name} ({e['chunks_seen']}{of} chunks)")
    return (f"[from excerpts: {', '.join(parts)}; this answer saw only these search hits, "
            f"not the whole document. Fix: {FIX}]")


def _hits(result: Any) -> list[Mapping[str, Any]]:
    """Search hits in a step's result (a list of hits, or a fan-out's list of lists)."""
    hits = []
    for item in result if isinstance(result, list) else ():
        if isinstance(item, list):
            hits.extend(_hits(item))
        elif isinstance(item, Mapping) and "chunk_id" in item and item.get("document_id"):
            hits.append(item)
    return hits


def _dicts(result: Any) -> list[Mapping[str, Any]]:
    if isinstance(result, Mapping):
        return [result]
    return [r for r in result if isinstance(r, Mapping)] if isinstance(result, list) else []


def _count(seen: dict[str, dict[str, Any]], chunks: dict[str, set[Any]],
           hit: Mapping[str, Any]) -> None:
    doc_id = str(hit["document_id"])
    raw = hit.get("document")
    document: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    entry = seen.setdefault(doc_id, {
        "document_id": doc_id, "source": str(document.get("source") or doc_id),
        "chunks_seen": 0, "chunks_total": document.get("n_chunks")})
    chunks.setdefault(doc_id, set()).add(hit["chunk_id"])
    entry["chunks_seen"] = len(chunks[doc_id])


def _read_whole(entry: Mapping[str, Any], whole: set[str]) -> bool:
    """Whether a step read this document whole: by id, whole source, or source path end
    (the names knowledge_read and ``documents`` accept)."""
    source = entry["source"]
    return any(n in (entry["document_id"], source) or source.endswith("/" + n.lstrip("/"))
               for n in whole)
