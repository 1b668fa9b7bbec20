"""Collections: each one is bound to the embedding model (name + dimension) that indexed it.

Searching or adding with another model is refused until ``onebox kb reembed``
re-computes the collection's vectors with the configured model.
"""

from __future__ import annotations

from typing import Any

from onebox.errors import Conflict, NotFound, ValidationError
from onebox.knowledge.queries import sql
from onebox.llm.embedding import EmbeddingModel
from onebox.store.db import Database

DEFAULT_COLLECTION = "default"


def check_collection_name(name: str) -> str:
    if not name or len(name) > 200 or not name.isprintable():
        raise ValidationError(
            "collection must be 1-200 printable characters", field="collection")
    return name


async def ensure_collection(db: Database, name: str, model: EmbeddingModel) -> dict[str, Any]:
    """Create the collection bound to ``model``, or check it is bound to it already."""
    check_collection_name(name)
    await db.fetch(sql("kb.create_collection") + " RETURNING name",
                   {"name": name, "model": model.name, "dim": model.dim})
    row = await get_collection(db, name)
    check_model(row, model)
    return row


async def get_collection(db: Database, name: str) -> dict[str, Any]:
    row = await db.fetchone(sql("kb.get_collection"), {"name": name})
    if row is None:
        raise NotFound(f"collection {name!r} does not exist; add documents with `onebox kb add`")
    return row


def check_model(collection: dict[str, Any], model: EmbeddingModel) -> None:
    if collection["embedding_model"] != model.name or collection["embedding_dim"] != model.dim:
        raise Conflict(
            f"collection {collection['name']!r} was indexed with "
            f"{collection['embedding_model']} ({collection['embedding_dim']}-d) but the "
            f"configured embedding model is {model.name} ({model.dim}-d). "
            f"Fix: run `onebox kb reembed --collection {collection['name']}` "
            "or switch ONEBOX_EMBEDDING__MODEL back.",
            field="embedding.model",
        )


async def list_collections(db: Database) -> list[dict[str, Any]]:
    return await db.fetch(sql("kb.list_collections"))


def space_of(collection: str) -> str:
    return f"kb:{collection}"


async def reembed_collection(
    db: Database, embedder: Any, name: str, progress: Any = None
) -> int:
    """Re-compute every vector of ``name`` with ``embedder``'s model and rebind the collection.

    ``embedder`` is a :class:`onebox.knowledge.embedder.CachedEmbedder`; ``progress``
    an optional ``(done, total)`` callback. Returns the number of chunks re-embedded.
    """
    from onebox.knowledge.embedder import vector_literal

    await get_collection(db, name)
    rows = await db.fetch(sql("kb.chunks_of_collection"), {"collection": name})
    texts = [f"{r['heading']}\n{r['content']}" if r["heading"] else r["content"] for r in rows]
    vectors = await embedder.passages(texts, progress)
    async with db.transaction() as conn:
        await conn.execute(sql("kb.set_embeddings"), {
            "ids": [r["id"] for r in rows], "embeddings": [vector_literal(v) for v in vectors]})
        await conn.execute(sql("kb.set_collection_model"),
                           {"name": name, "model": embedder.model.name, "dim": embedder.model.dim})
    return len(rows)


TENANT_SEP = "/"
CLI_TENANT = "default"  # the tenant the CLI acts for: the installation's own


def tenant_prefix(tenant_id: str) -> str:
    """Collections and memory and cache scopes of a tenant are stored as ``<tenant>/<name>``."""
    return tenant_id + TENANT_SEP


def tenant_name(tenant_id: str, name: str) -> str:
    """The one stored name of a tenant's collection or scope: ``<tenant>/<name>`` for every
    tenant, ``default`` (the CLI's) included, so the CLI, the API and runs agree (migration
    0022 moved the unprefixed names the CLI used to write)."""
    return tenant_prefix(tenant_id) + name


def local_name(tenant_id: str, stored: str) -> str:
    """``stored`` as the tenant names it (without its prefix)."""
    prefix = tenant_prefix(tenant_id)
    return stored[len(prefix):] if stored.startswith(prefix) else stored


def tenant_visible(stored: str, tenant_id: str) -> bool:
    """Whether a stored collection or scope belongs to ``tenant_id``."""
    return stored.startswith(tenant_prefix(tenant_id))
