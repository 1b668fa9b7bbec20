"""`onebox memory remember|recall|forget|compact|restore`: agent memory from the shell.

The CLI acts as the ``default`` tenant: scope ``proj`` is stored as ``default/proj``
(:func:`onebox.knowledge.collections.tenant_name`), as the API stores it for tenant
``default`` and as runs read it; memories of other tenants are not found from here.
"""

from __future__ import annotations

import json
from typing import Any, cast

import click

from onebox.cli import common
from onebox.knowledge.archive import CompactResult, compact, restore
from onebox.knowledge.collections import CLI_TENANT, tenant_name, tenant_prefix, tenant_visible
from onebox.knowledge.memory import MemoryKind, MemoryStore, check_id
from onebox.knowledge.service import open_knowledge
from onebox.knowledge.tenants import tenant_scopes


def register(main: click.Group) -> None:
    main.add_command(memory)


@click.group("memory")
def memory() -> None:
    """Remember facts per scope and user, recall them, forget them, compact old ones."""


def _stored(scope: str) -> str:
    return tenant_name(CLI_TENANT, scope)


async def _foreign(store: MemoryStore, memory_id: str) -> bool:
    """Whether ``memory_id`` is a live memory of another tenant (the CLI answers not found)."""
    row = await store.get(check_id(memory_id))
    return row is not None and not tenant_visible(str(row["scope"]), CLI_TENANT)


def _metadata(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        common.fail(f"--metadata is not valid JSON: {exc}", code=2)
    if not isinstance(value, dict):
        common.fail("--metadata must be a JSON object", code=2)
    return value


@memory.command("remember")
@click.argument("content")
@click.option("--scope", "-s", required=True)
@click.option("--user", "user_id", default="", help="the user this memory belongs to")
@click.option("--kind", type=click.Choice(["short", "long"]), default="short", show_default=True)
@click.option("--metadata", help="a JSON object stored with the memory")
@click.option("--supersedes", help="id of the memory this one replaces")
@click.option("--at", "happened_at", help="when it happened or was said (2023-05-08, '8 May 2023')")
@common.json_option
def remember_cmd(content: str, scope: str, user_id: str, kind: str, metadata: str | None,
                 supersedes: str | None, happened_at: str | None, as_json: bool) -> None:
    """Store CONTENT; a duplicate returns the existing id with deduplicated=true."""

    async def go() -> dict[str, Any]:
        async with open_knowledge(common.settings()) as knowledge:
            return await knowledge.memory.remember(
                _stored(scope), content, user_id=user_id, metadata=_metadata(metadata),
                kind=cast(MemoryKind, kind), supersedes=supersedes, happened_at=happened_at)

    result = common.run(go())
    if as_json:
        common.print_json(result)
    else:
        state = "duplicate of" if result["deduplicated"] else "remembered"
        common.out.print(f"{state} {result['id']}")


@memory.command("recall")
@click.argument("query")
@click.option("--scope", "-s", required=True)
@click.option("--user", "user_id", default="")
@click.option("-k", "k", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option("--all", "include_superseded", is_flag=True, help="include superseded memories")
@common.json_option
def recall_cmd(query: str, scope: str, user_id: str, k: int, include_superseded: bool,
               as_json: bool) -> None:
    """Hybrid recall within SCOPE for one user."""

    async def go() -> list[dict[str, Any]]:
        async with open_knowledge(common.settings()) as knowledge:
            hits = await knowledge.memory.recall(_stored(scope), query, k, user_id, include_superseded)
            return [h.to_dict() for h in hits]

    hits = common.run(go())
    if as_json:
        common.print_json({"scope": scope, "query": query, "memories": hits})
        return
    if not hits:
        common.out.print("nothing recalled")
    for hit in hits:
        when = f"  [{hit['when']}]" if hit.get("when") else ""
        common.out.print(f"{hit['id']}  {hit['scores']['fused']:.3f}  {hit['content']}{when}",
                         markup=False)


@memory.command("forget")
@click.argument("memory_id")
@click.option("--user", "user_id", default=None, help="only if it belongs to this user")
@common.json_option
def forget_cmd(memory_id: str, user_id: str | None, as_json: bool) -> None:
    """Delete one memory for good (also from the archive)."""

    async def go() -> bool:
        async with open_knowledge(common.settings()) as knowledge:
            return await knowledge.memory.forget(memory_id, user_id,
                                                 scope_prefix=tenant_prefix(CLI_TENANT))

    deleted = common.run(go())
    if as_json:
        common.print_json({"id": memory_id, "deleted": deleted})
    elif deleted:
        common.out.print(f"forgot {memory_id}")
    if not deleted:
        common.fail(f"memory {memory_id} not found")


@memory.command("compact")
@click.option("--scope", "-s", help="default: every scope of the default tenant")
@click.option("--older-than-days", default=30.0, show_default=True, type=float)
@click.option("--max-access", default=1, show_default=True, type=int,
              help="only memories recalled at most this often")
@common.json_option
def compact_cmd(scope: str | None, older_than_days: float, max_access: int,
                as_json: bool) -> None:
    """Condense old, rarely used memories into summaries; originals go to the archive."""

    async def go() -> Any:
        async with open_knowledge(common.settings()) as knowledge:
            return await _compact(knowledge.memory, scope, older_than_days, max_access)

    result = common.run(go())
    if as_json:
        common.print_json({"archived": result.archived, "summaries": result.summaries})
    else:
        common.out.print(f"archived {result.archived} memories into "
                         f"{len(result.summaries)} summaries")


async def _compact(store: MemoryStore, scope: str | None, older_than_days: float,
                   max_access: int) -> CompactResult:
    """Compact one scope of the default tenant, or each of its scopes."""
    scopes = [_stored(scope)] if scope else [
        s["scope"] for s in await tenant_scopes(store.db, tenant_prefix(CLI_TENANT))]
    total = CompactResult()
    for stored in scopes:
        done = await compact(store, stored, older_than_days, max_access)
        total.archived += done.archived
        total.summaries.extend(done.summaries)
    return total


@memory.command("restore")
@click.argument("summary_id")
@common.json_option
def restore_cmd(summary_id: str, as_json: bool) -> None:
    """Bring a summary's archived originals back and drop the summary."""

    async def go() -> int:
        async with open_knowledge(common.settings()) as knowledge:
            if await _foreign(knowledge.memory, summary_id):
                return 0
            return await restore(knowledge.memory, summary_id)

    n = common.run(go())
    if as_json:
        common.print_json({"summary_id": summary_id, "restored": n})
    else:
        common.out.print(f"restored {n} memories")
    if n == 0:
        raise click.exceptions.Exit(1)
