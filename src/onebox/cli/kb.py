"""`onebox kb add|search|list|remove|reembed`: the knowledge base from the shell.

The CLI acts as the ``default`` tenant: collection ``docs`` is stored as ``default/docs``
(:func:`onebox.knowledge.collections.tenant_name`), exactly what the API stores for a key of
tenant ``default``, so the console, the API and runs see what the CLI added, and back.
"""

from __future__ import annotations

import functools
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from onebox.cli import common
from onebox.knowledge.collections import (
    CLI_TENANT,
    DEFAULT_COLLECTION,
    list_collections,
    local_name,
    reembed_collection,
    tenant_name,
    tenant_prefix,
    tenant_visible,
)
from onebox.knowledge.ingest import IngestProgress
from onebox.knowledge.reembed import reembed_memories
from onebox.knowledge.search import SearchFilters
from onebox.knowledge.service import open_knowledge
from onebox.knowledge.tenants import tenant_documents

LIST_LIMIT = 1000  # documents `kb list` prints


def register(main: click.Group) -> None:
    main.add_command(kb)


@click.group("kb")
def kb() -> None:
    """Knowledge base: add files, search them, list and remove documents."""


def _stored(collection: str) -> str:
    return tenant_name(CLI_TENANT, collection)


def _shown(stored: str) -> str:
    return local_name(CLI_TENANT, stored)


async def _own_collections(db: Any) -> list[dict[str, Any]]:
    """The default tenant's collections, named as the tenant names them."""
    return [dict(c, name=_shown(c["name"])) for c in await list_collections(db)
            if tenant_visible(c["name"], CLI_TENANT)]


def _meta(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            common.fail(f"--meta expects KEY=VALUE, got {pair!r}", code=2)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


@kb.command("add")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--collection", "-c", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--meta", multiple=True, help="KEY=VALUE metadata on every document (repeatable)")
@click.option("--execution-id", help="the task execution that produced these files")
@click.option("--snapshot-id", help="the workspace snapshot these files come from")
@common.json_option
def add_cmd(paths: tuple[Path, ...], collection: str, meta: tuple[str, ...],
            execution_id: str | None, snapshot_id: str | None, as_json: bool) -> None:
    """Add files and folders (text, Markdown, HTML, PDF, DOCX, code); unchanged ones are skipped."""
    results = common.run(_add(list(paths), collection, _meta(meta), execution_id, snapshot_id,
                              show_progress=not as_json))
    rows = [r.__dict__ for r in results]
    if as_json:
        common.print_json({"collection": collection, "documents": rows})
        return
    counts = {s: sum(1 for r in results if r.status == s) for s in ("added", "updated", "unchanged")}
    common.out.print(f"{len(results)} documents in {collection!r}: " +
                     ", ".join(f"{n} {s}" for s, n in counts.items()) +
                     f"; {sum(r.chunks_added for r in results)} chunks indexed")


class RateColumn(ProgressColumn):
    """Chunks per second, from rich's own speed estimate."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:.1f}/s" if task.speed else "", style="progress.data.speed")


class PlainProgress:
    """Progress as plain lines on stderr (no TTY): one every ``every_s`` seconds and the last."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self.started = self.last = time.monotonic()

    def __call__(self, state: IngestProgress) -> None:
        now = time.monotonic()
        finished = state.files_done == state.files_total
        if now - self.last < self.every_s and not finished:
            return
        self.last = now
        common.err.print(plain_line(state, now - self.started), markup=False, highlight=False)


def plain_line(state: IngestProgress, elapsed_s: float) -> str:
    rate = state.chunks_embedded / elapsed_s if elapsed_s > 0 else 0.0
    left = max(state.chunks_total - state.chunks_embedded, 0)
    eta = f"ETA {left / rate:.0f} s" if rate > 0 and left else "ETA -"
    return (f"kb add: {state.files_done}/{state.files_total} files, {state.chunks_embedded}/"
            f"{state.chunks_total} chunks embedded, {rate:.1f} chunks/s, {eta}")


async def _add(paths: list[Path], collection: str, meta: dict[str, Any],
               execution_id: str | None, snapshot_id: str | None, show_progress: bool) -> Any:
    async with open_knowledge(common.settings()) as knowledge:
        add = functools.partial(knowledge.kb.add_paths, paths, _stored(collection), meta,
                                execution_id, snapshot_id)
        if show_progress and not common.err.is_terminal:
            return await add(progress=PlainProgress())
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   RateColumn(), TimeRemainingColumn(), TextColumn("{task.fields[file]}"))
        with Progress(*columns, console=common.err, disable=not show_progress) as bar:
            files = bar.add_task("files", total=None, file="")
            chunks = bar.add_task("chunks embedded", total=None, file="")

            def report(state: IngestProgress) -> None:
                bar.update(files, total=state.files_total, completed=state.files_done,
                           file=Path(state.current).name)
                bar.update(chunks, total=state.chunks_total or None,
                           completed=state.chunks_embedded)

            return await add(progress=report)


@kb.command("search")
@click.argument("query")
@click.option("--collection", "-c", "collections", multiple=True, help="limit to (repeatable)")
@click.option("-k", "k", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--meta", multiple=True, help="KEY=VALUE the chunk metadata must contain")
@click.option("--since", type=click.DateTime(), help="only chunks indexed at or after")
@click.option("--until", type=click.DateTime(), help="only chunks indexed before")
@common.json_option
def search_cmd(query: str, collections: tuple[str, ...], k: int, meta: tuple[str, ...],
               since: datetime | None, until: datetime | None, as_json: bool) -> None:
    """Hybrid (full-text + vector) search; prints each hit with its document and scores."""

    async def go() -> list[dict[str, Any]]:
        async with open_knowledge(common.settings()) as knowledge:
            names = [_stored(c) for c in collections] or [
                _stored(c["name"]) for c in await _own_collections(knowledge.db)]
            if not names:
                return []
            filters = SearchFilters(names, _meta(meta) or None, since, until)
            hits = [h.to_dict() for h in await knowledge.search(query, k, filters)]
            for hit in hits:
                hit["document"] = dict(hit["document"],
                                       collection=_shown(hit["document"]["collection"]))
            return hits

    hits = common.run(go())
    if as_json:
        common.print_json({"query": query, "hits": hits})
        return
    if not hits:
        common.out.print("no hits")
    for rank, hit in enumerate(hits, start=1):
        doc, scores = hit["document"], hit["scores"]
        score_text = " ".join(f"{name}={value:.3f}" for name, value in scores.items())
        common.out.print(f"[bold]{rank}. {escape(str(doc['title'] or doc['source']))}[/] "
                         f"({escape(str(doc['collection']))}, chunk {hit['ordinal']}) "
                         f"{score_text}")
        common.out.print(f"   {hit['content'][:300]}", markup=False)


@kb.command("list")
@click.option("--collection", "-c", help="list the documents of one collection")
@common.json_option
def list_cmd(collection: str | None, as_json: bool) -> None:
    """List collections and their documents."""

    async def go() -> dict[str, Any]:
        async with open_knowledge(common.settings()) as knowledge:
            docs = await tenant_documents(
                knowledge.db, tenant_prefix(CLI_TENANT), limit=LIST_LIMIT,
                collection=_stored(collection) if collection else None)
            return {"collections": await _own_collections(knowledge.db),
                    "documents": [dict(d, collection=_shown(d["collection"])) for d in docs]}

    data = common.run(go())
    if as_json:
        common.print_json(data)
        return
    table = Table("collection", "source", "type", "chunks", "updated")
    for doc in data["documents"]:
        table.add_row(doc["collection"], doc["source"], doc["source_type"],
                      str(doc["n_chunks"]), f"{doc['updated_at']:%Y-%m-%d %H:%M}")
    common.out.print(table)


@kb.command("remove")
@click.argument("sources", nargs=-1, required=True)
@click.option("--collection", "-c", default=DEFAULT_COLLECTION, show_default=True)
@common.json_option
def remove_cmd(sources: tuple[str, ...], collection: str, as_json: bool) -> None:
    """Remove documents (by path or source name) and their chunks."""

    async def go() -> dict[str, bool]:
        async with open_knowledge(common.settings()) as knowledge:
            out = {}
            for source in sources:
                out[source] = await _remove(knowledge, source, collection)
            return out

    removed = common.run(go())
    if as_json:
        common.print_json({"removed": removed})
    else:
        for source, done in removed.items():
            common.out.print(f"{'removed' if done else 'not found'}: {source}", markup=False)
    if not all(removed.values()):
        raise click.exceptions.Exit(1)


async def _remove(knowledge: Any, source: str, collection: str) -> bool:
    """The document SOURCE names: its stored name (``notes/a.md``), a file's path (stored
    under its file name), or the absolute path a document added before names was kept under."""
    path = Path(source)
    keys = [source, path.name, *([str(path.resolve())] if path.exists() else [])]
    for key in dict.fromkeys(keys):
        if await knowledge.kb.remove(key, _stored(collection)):
            return True
    return False


@kb.command("reembed")
@click.option("--collection", "-c", "collections", multiple=True,
              help="default: every collection of every tenant, and every memory")
@common.json_option
def reembed_cmd(collections: tuple[str, ...], as_json: bool) -> None:
    """Re-compute vectors with the configured embedding model and rebind the collections.

    The embedding model is the installation's, so without --collection every tenant's
    collections and every tenant's memories are re-embedded (another tenant's collection
    shown as ``<tenant>/<name>``); with --collection only those collections."""

    async def go() -> dict[str, Any]:
        async with open_knowledge(common.settings()) as knowledge:
            names = [_stored(c) for c in collections] or [
                c["name"] for c in await list_collections(knowledge.db)]
            done: dict[str, Any] = {"reembedded": {
                _shown(n): await reembed_collection(knowledge.db, knowledge.embedder, n)
                for n in names}}
            if not collections:
                done["memories"] = await reembed_memories(knowledge.db, knowledge.embedder)
            return done

    done = common.run(go())
    if as_json:
        common.print_json(done)
        return
    for name, n in done["reembedded"].items():
        common.out.print(f"{name}: {n} chunks re-embedded")
    if "memories" in done:
        common.out.print(f"memories: {done['memories']} re-embedded")
