"""`onebox chat`: a conversation in the terminal, each message a turn of a thread.

Each turn runs here as `onebox run` does in the foreground (the steps table with the running
steps' live output; Ctrl-C cancels the turn), in the thread's workspace, up to the end of its
run: the agent's answer, then the turn's upkeep steps (its facts and the summary, see
:mod:`onebox.runtime.thread_steps`), then its answer is printed and the next prompt shown
(a turn whose upkeep waits for the model provider shows its answer at once). ``--thread``
continues a thread (days later too); an empty line or ``/exit`` (or end of input) leaves.
Without a terminal (stdin and stdout piped) it reads one message a line and prints plain
lines: the steps as they start and end, their output, the answers (:mod:`.chat_view`).
"""

from __future__ import annotations

import asyncio
import uuid

import click

from onebox.cli import common
from onebox.cli.chat_view import TurnView
from onebox.cli.foreground import INTERRUPTED_EXIT, CtrlC
from onebox.cli.render import answer_panel
from onebox.config import Settings
from onebox.errors import NotFound, ValidationError
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import embedding_model_from_settings
from onebox.llm.registry import chat_model_from_settings
from onebox.runtime import threads
from onebox.runtime.service import Runtime

TENANT = "default"
LEAVE = ("", "/exit", "/quit")


def register(main: click.Group) -> None:
    main.add_command(chat_cmd)


@click.command("chat")
@click.option("--thread", "thread_id", help="continue this thread (`onebox thread list`)")
@click.option("--profile", help="the agent profile of a new thread (`onebox profile list`)")
@click.option("--title", default="", help="a title for a new thread")
def chat_cmd(thread_id: str | None, profile: str | None, title: str) -> None:
    """Talk to the agent: it runs code in the thread's workspace and remembers the
    conversation through memory (not by replaying it)."""
    if thread_id is not None and profile is not None:
        common.fail("--profile gives a NEW thread its profile; a thread continued with "
                    "--thread keeps its own: leave out one of them", code=2)
    settings = common.settings()
    if profile is None:
        common.run_sync(lambda: chat_model_from_settings(settings.llm))  # says what to set
    tid = common.run_sync(lambda: _thread_id(thread_id)) if thread_id else None
    code = common.run(_chat(settings, tid, profile, title))
    raise click.exceptions.Exit(code)


async def _chat(settings: Settings, thread_id: uuid.UUID | None, profile: str | None,
                title: str) -> int:
    async with await Runtime.open(settings) as rt:
        model = embedding_model_from_settings(settings)
        try:
            knowledge = Knowledge.build(rt.db, model, settings)
            thread = await _open_thread(rt, settings, thread_id, profile, title)
            common.out.print(f"thread [bold cyan]{thread.id}[/] (turn {thread.turns}); "
                             f"continue it later with `onebox chat --thread {thread.id}`")
            return await _converse(rt, settings, knowledge, thread)
        finally:
            await model.close()


def _thread_id(value: str) -> uuid.UUID:
    try:
        return threads.parse_thread_id(value)
    except ValidationError as exc:
        raise ValidationError(f"--thread: {exc.message}", field="thread") from None


async def _open_thread(rt: Runtime, settings: Settings, thread_id: uuid.UUID | None,
                       profile: str | None, title: str) -> threads.Thread:
    """The thread continued (``--thread``) or a new one; errors name the flag."""
    flag = "--thread" if thread_id else "--profile"
    try:
        if thread_id is not None:
            return await threads.get_thread(rt.db, TENANT, thread_id)
        return await threads.create_thread(rt.db, settings, TENANT, title=title,
                                           profile=profile)
    except NotFound as exc:
        raise NotFound(f"{flag}: {exc.message}", field=flag.lstrip("-")) from None


async def _converse(rt: Runtime, settings: Settings, knowledge: Knowledge,
                    thread: threads.Thread) -> int:
    while True:
        try:
            message = (await asyncio.to_thread(input, "you> ")).strip()
        except EOFError:
            return 0
        if message in LEAVE:
            return 0
        posted = await threads.post_message(rt.db, settings, knowledge, TENANT, thread.id,
                                            message)
        if await _turn(rt, posted) == "INTERRUPTED":
            return INTERRUPTED_EXIT


async def _turn(rt: Runtime, posted: threads.Posted) -> str:
    """Drive the turn's run here with live steps; print its answer (or why it has none)."""
    ctx = posted.context.to_record()
    common.out.print(f"turn {posted.turn}, run {posted.run_id}: context "
                     f"{ctx['total_tokens']} tokens", style="dim")
    with TurnView(rt.db, posted.run_id, common.out) as watch, \
            CtrlC(rt.db, posted.run_id, common.out, on_first=watch.stop) as ctrl_c:
        run = await rt.drive(posted.run_id, progress=watch.update)
    if watch.answered and run["status"] == "SUCCEEDED":
        common.out.print("the turn's upkeep is done", style="dim")
    elif (panel := answer_panel(run)) is not None:
        common.out.print(panel)
    elif run["status"] != "SUCCEEDED":
        common.out.print(f"the turn ended {run['status']}: {run['error'] or 'no answer'} "
                         f"(`onebox show {posted.run_id}`)", markup=False, soft_wrap=True)
    return "INTERRUPTED" if ctrl_c.pressed else str(run["status"])
