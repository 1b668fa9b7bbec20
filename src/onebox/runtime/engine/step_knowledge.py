"""Knowledge grows during runs: files a step declares in ``knowledge`` are ingested, after the
step succeeded, with the execution and snapshot that produced them.

The files come from an untrusted workspace: each is opened without following symlinks
at any path component, must be a regular file of at most ``knowledge.parse_max_bytes``
(checked with fstat before reading), and is parsed by its extension (text, Markdown,
HTML, PDF, DOCX, source code) with :func:`onebox.knowledge.docparse.parse_document`:
PDF, DOCX and HTML in the document sandbox, never in the worker. A file that cannot be
read or parsed (too large, malformed, over the parser's time or memory limit) is
reported as not ingested with the reason; the step is not failed for it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from onebox.config import Settings
from onebox.errors import OneboxError, ValidationError
from onebox.knowledge.docparse import ParseLimits, parse_document, read_bounded
from onebox.store import runs as store
from onebox.store.db import Database

if TYPE_CHECKING:
    from onebox.knowledge.service import Knowledge

COLLECTION = "runs"


class StepKnowledge:
    """Lazily loads the embedding model the first time a step declares knowledge."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db, self.settings = db, settings
        self._knowledge: Knowledge | None = None

    async def ingest(self, row: store.Row, workspace: Path, paths: tuple[str, ...]) -> list[dict[str, Any]]:
        """Add each declared file; returns one record per file (document id or error)."""
        kb = (await self.knowledge()).kb
        snapshot = await self.db.fetchone(
            "SELECT t.snapshot_id, r.tenant_id FROM onebox.task_execution t"
            " JOIN onebox.runs r ON r.id = t.run_id WHERE t.id = %s", (row["id"],))
        tenant = snapshot["tenant_id"] if snapshot else "default"
        limits = ParseLimits.from_settings(self.settings.knowledge)
        done = []
        for rel in paths:
            try:
                data = await asyncio.to_thread(_read, workspace, rel, limits.max_bytes)
                doc = await parse_document(data, PurePosixPath(rel).name, limits, "knowledge")
                result = await kb.add_document(_document(doc, row, rel, snapshot, tenant))
                done.append({"path": rel, "document_id": result.document_id,
                             "status": result.status})
            except (OneboxError, OSError) as exc:
                done.append({"path": rel, "error": getattr(exc, "message", None) or str(exc)})
        return done

    async def knowledge(self) -> Knowledge:
        """The knowledge base and memory of this database, built on first use."""
        if self._knowledge is None:
            from onebox.knowledge.service import Knowledge
            from onebox.llm.embedding import embedding_model_from_settings

            model = embedding_model_from_settings(self.settings)
            self._knowledge = Knowledge.build(self.db, model, self.settings)
        return self._knowledge

    async def close(self) -> None:
        if self._knowledge is not None:
            await self._knowledge.embedder.model.close()


def _read(workspace: Path, rel: str, max_bytes: int) -> bytes:
    from onebox.sandbox.snapshot_files import open_regular

    clean = PurePosixPath(rel)
    if clean.is_absolute() or ".." in clean.parts or not clean.parts:
        raise ValidationError(f"{rel!r} must be a relative path inside the workspace",
                              field="knowledge")
    fd = open_regular(workspace, str(clean))
    try:
        return read_bounded(fd, rel, max_bytes, "knowledge")
    finally:
        os.close(fd)


def _document(doc: Any, row: store.Row, rel: str, snapshot: dict[str, Any] | None,
              tenant: str) -> Any:
    """The file as a document of the run's tenant, in its collection ``<tenant>/runs``."""
    from onebox.knowledge.collections import tenant_name
    from onebox.knowledge.ingest import DocumentInput

    collection = tenant_name(tenant, COLLECTION)
    return DocumentInput(
        source=f"run-{row['run_id']}/{rel}", sections=doc.sections, collection=collection,
        source_type=doc.source_type, title=doc.title, text=doc.original,
        metadata={"run_id": str(row["run_id"]), "step_id": row["step_id"], "path": rel},
        execution_id=str(row["id"]),
        snapshot_id=str(snapshot["snapshot_id"]) if snapshot and snapshot["snapshot_id"] else None)
