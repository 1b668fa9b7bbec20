"""`onebox thread list|show|rm|fork`: the tenant's conversations and their turns."""

from __future__ import annotations

import uuid
from typing import Any

import click
from rich.table import Table

from onebox.cli import common
from onebox.cli.render import safe_text
from onebox.runtime.services.runs import resolve_id, short_ids
from onebox.runtime.threads import service as threads
from onebox.store.db import Database

TENANT = "default"  # the CLI's tenant, as for runs, memory and knowledge


def register(main: click.Group) -> None:
    main.add_command(thread_group)


@click.group("thread")
def thread_group() -> None:
    """Conversations that remember (`onebox chat` holds one)."""


@thread_group.command("list")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@common.json_option
def list_cmd(limit: int, as_json: bool) -> None:
    """The threads, most recently used first."""
    async def listed(db: Database) -> tuple[list[threads.Thread], dict[uuid.UUID, str]]:
        found = await threads.list_threads(db, TENANT, limit=limit)
        if as_json or common.out.width >= common.WIDE_COLUMNS:
            return found, {}
        return found, await short_ids(db, [t.id for t in found], kind="thread",
                                      tenant_id=TENANT)

    found, ids = common.with_db(common.settings(), listed)
    if as_json:
        common.print_json({"threads": [t.to_dict() for t in found]})
        return
    table = Table("id", "title", "profile", "turns", "updated")
    table.columns[0].no_wrap = True  # whole ids, or unique prefixes when narrow: commands take both
    for t in found:
        table.add_row(ids.get(t.id, str(t.id)), t.title or "-", t.profile or "-", str(t.turns),
                      t.updated_at.strftime("%Y-%m-%d %H:%M"))
    common.out.print(table if found else "no threads yet: `onebox chat` starts one")


@thread_group.command("show")
@click.argument("thread_id")
@common.json_option
def show_cmd(thread_id: str, as_json: bool) -> None:
    """A thread's turns: message, run, status, answer and what fed each turn's context."""
    async def show(db: Database) -> dict[str, Any]:
        return await threads.show_thread(db, TENANT, await _resolve(db, thread_id))

    shown = common.with_db(common.settings(), show)
    if as_json:
        common.print_json(shown)
        return
    t = shown["thread"]
    common.out.print(f"thread [bold cyan]{t['id']}[/] {t['title']}  profile "
                     f"{t['profile'] or '-'}  session {t['session_id']}  summary "
                     f"v{t['summary_version']}")
    if t.get("forked_from"):
        origin = t["forked_from"]
        common.out.print(f"forked from thread {origin['thread_id']} at turn {origin['turn']}")
    if t["summary"]:
        common.out.print(f"summary: {t['summary']}", markup=False, soft_wrap=True)
    for turn in shown["turns"]:
        _print_turn(turn)


async def _resolve(db: Database, text: str) -> uuid.UUID:
    """A whole thread id, or the one of this tenant's threads that starts with ``text``."""
    return await resolve_id(db, text, kind="thread", tenant_id=TENANT)


def _print_turn(turn: dict[str, Any]) -> None:
    ctx = turn["context"]
    mems = len((ctx["parts"].get("memories") or {}).get("sources") or [])
    common.out.print(f"\n[bold]turn {turn['turn']}[/] run {turn['run_id']} "
                     f"{turn['status'] or 'REMOVED'}  context {ctx['total_tokens']} tokens, "
                     f"{mems} memories, summary v{ctx['summary_version']}")
    common.out.print(f"user: {safe_text(turn['message'])}", markup=False, soft_wrap=True)
    answer = turn["answer"] or turn["error"] or "(no answer yet)"
    common.out.print(f"agent: {safe_text(answer)}", markup=False, soft_wrap=True)
    if turn.get("upkeep_error"):
        common.out.print(f"not remembered (upkeep failed): {turn['upkeep_error']}",
                         markup=False, soft_wrap=True)


@thread_group.command("rm")
@click.argument("thread_id")
@common.json_option
def rm_cmd(thread_id: str, as_json: bool) -> None:
    """Delete a thread, its turns and its memories (its runs stay)."""
    settings = common.settings()

    async def remove(db: Database) -> tuple[uuid.UUID, int]:
        from onebox.knowledge.service import Knowledge
        from onebox.llm.embedding import embedding_model_from_settings

        tid = await _resolve(db, thread_id)
        model = embedding_model_from_settings(settings)
        try:
            return tid, await threads.remove_thread(db, Knowledge.build(db, model, settings),
                                                    TENANT, tid)
        finally:
            await model.close()

    tid, forgotten = common.with_db(settings, remove)
    if as_json:
        common.print_json({"thread_id": tid, "removed": True, "memories_forgotten": forgotten})
    else:
        common.out.print(f"thread {tid} removed ({forgotten} memories forgotten)")


@thread_group.command("fork")
@click.argument("thread_id")
@click.option("--turn", type=click.IntRange(1), required=True,
              help="the turn to go on from: the turns before it are kept as they were")
@click.option("--message", help="what to say at that turn (default: what was said)")
@click.option("--profile", help="the stored profile the fork's turns use (default: the "
              "thread's)")
@click.option("--detach", is_flag=True, help="post the turn and print the new thread's id; "
              "a running `onebox up` answers it")
@click.option("--no-post", "no_post", is_flag=True, help="only make the fork; post later "
              "with `onebox chat --thread ID`")
@common.json_option
def fork_cmd(thread_id: str, turn: int, message: str | None, profile: str | None,
             detach: bool, no_post: bool, as_json: bool) -> None:
    """Fork a thread at TURN: a new thread holding the conversation before that turn (its
    turns, memory, summary and workspace), with TURN asked again in it."""
    from onebox.cli.runs import _finish
    from onebox.knowledge.service import Knowledge
    from onebox.llm.embedding import embedding_model_from_settings
    from onebox.runtime.services.service import Runtime
    from onebox.runtime.threads.forking import fork_thread

    settings = common.settings()

    async def go() -> str:
        async with await Runtime.open(settings) as rt:
            tid = await _resolve(rt.db, thread_id)
            model = embedding_model_from_settings(settings)
            try:
                forked = await fork_thread(rt.db, settings, Knowledge.build(rt.db, model,
                                                                            settings),
                                           TENANT, tid, turn=turn, message=message,
                                           profile=profile, post=not no_post)
            finally:
                await model.close()
            posted = forked.posted
            if as_json and (detach or posted is None):
                common.print_json({"thread": forked.thread.to_dict(),
                                   "copied_turns": forked.copied_turns,
                                   "memories": forked.memories,
                                   "run_id": posted and str(posted.run_id)})
            elif not as_json:
                common.out.print(
                    f"thread [bold cyan]{forked.thread.id}[/] forked from {tid} at turn "
                    f"{turn}: kept {forked.copied_turns} turn(s) and {forked.memories} "
                    "memories" + (f"; turn {turn} is run {posted.run_id}" if posted else ""))
            if posted is None or detach:
                return "SUCCEEDED"
            return await _finish(rt, posted.run_id, as_json)

    status = common.run(go())
    raise click.exceptions.Exit(0 if status == "SUCCEEDED" else 1)
