"""`onebox chat`: a conversation in the terminal, each message a turn of a thread.

Each turn runs here as `onebox run` does in the foreground (the steps table with the running
steps' live output; Ctrl-C cancels the turn), in the thread's workspace, up to the end of its
run: the agent's answer is printed as soon as the agent has it, then the turn's upkeep steps
run (its facts and the summary, see :mod:`onebox.runtime.threads.steps`), then the next
prompt is shown. Once the answer is shown, Ctrl-C no longer cancels: it leaves the upkeep to
the workers (`onebox up`) and the chat. A turn not ended when the chat starts or a message
is sent (left so, or posted from the console meanwhile) is finished here first.
``--thread`` continues a thread (days later too); an empty line or ``/exit`` (or end of
input) leaves.
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
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import embedding_model_from_settings
from onebox.llm.registry import chat_model_from_settings
from onebox.runtime.services.runs import prefix_range, resolve_id
from onebox.runtime.services.service import Runtime
from onebox.runtime.threads import service as threads

TENANT = "default"
LEAVE = ("", "/exit", "/quit")
LEFT = "LEFT"  # the turn's run was left to the workers (Ctrl-C after its answer)
LEAVE_DRAIN_S = 2.0  # a step running when the chat leaves gets this long, then its lease goes back


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
    if profile is None and thread_id is None:
        common.run_sync(lambda: chat_model_from_settings(settings.llm))  # says what to set
    if thread_id is not None:
        common.run_sync(lambda: _thread_id(thread_id))  # the form, before anything starts
    code = common.run(_chat(settings, thread_id, profile, title))
    raise click.exceptions.Exit(code)


async def _chat(settings: Settings, thread_id: str | None, profile: str | None,
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


def _thread_id(value: str) -> None:
    """A whole thread id or a hex prefix of one (as ``onebox thread list`` prints them)."""
    try:
        prefix_range(value, "thread")
    except ValidationError as exc:
        raise ValidationError(f"--thread: {exc.message}", field="thread") from None


async def _open_thread(rt: Runtime, settings: Settings, thread_id: str | None,
                       profile: str | None, title: str) -> threads.Thread:
    """The thread continued (``--thread``, a whole id or a unique prefix) or a new one;
    errors name the flag."""
    flag = "--thread" if thread_id else "--profile"
    try:
        if thread_id is not None:
            tid = await resolve_id(rt.db, thread_id, kind="thread", tenant_id=TENANT)
            thread = await threads.get_thread(rt.db, TENANT, tid)
            if thread.profile is None:  # its turns use this machine's model: say what to set
                chat_model_from_settings(settings.llm)
            return thread
        return await threads.create_thread(rt.db, settings, TENANT, title=title,
                                           profile=profile)
    except NotFound as exc:
        raise NotFound(f"{flag}: {exc.message}", field=flag.lstrip("-")) from None
    except ValidationError as exc:  # an ambiguous prefix
        raise ValidationError(f"{flag}: {exc.message}", field=flag.lstrip("-")) from None


async def _converse(rt: Runtime, settings: Settings, knowledge: Knowledge,
                    thread: threads.Thread) -> int:
    if await _finish_unfinished(rt, thread) == LEFT:  # left so, or posted elsewhere
        return INTERRUPTED_EXIT
    while True:
        try:
            message = (await asyncio.to_thread(input, "you> ")).strip()
        except EOFError:
            return 0
        if message in LEAVE:
            return 0
        if await _finish_unfinished(rt, thread) == LEFT:  # a turn posted meanwhile
            return INTERRUPTED_EXIT
        try:
            posted = await threads.post_message(rt.db, settings, knowledge, TENANT, thread.id,
                                                message)
        except Conflict as exc:  # another client's turn, posted in between: say it again
            common.out.print(f"{exc.message}; your message was not sent: send it again",
                             markup=False, soft_wrap=True)
            continue
        ctx = posted.context.to_record()
        common.out.print(f"turn {posted.turn}, run {posted.run_id}: context "
                         f"{ctx['total_tokens']} tokens", style="dim")
        if await _turn(rt, posted.run_id, thread) in ("INTERRUPTED", LEFT):
            return INTERRUPTED_EXIT


async def _finish_unfinished(rt: Runtime, thread: threads.Thread) -> str:
    """Drive the thread's last turn here when its run has not ended (its upkeep left to
    the workers, or a turn posted from elsewhere), so the next message is not refused."""
    last = await threads.unfinished_turn(rt.db, thread)
    if last is None:
        return "ENDED"
    common.out.print(f"turn {last['turn']} (run {last['run_id']}) has not ended: finishing "
                     "it here first (Ctrl-C leaves it to the workers)", style="dim")
    return await _turn(rt, last["run_id"], thread, keep=True)


async def _turn(rt: Runtime, run_id: uuid.UUID, thread: threads.Thread, *,
                keep: bool = False) -> str:
    """Drive the turn's run here with live steps; print its answer (or why it has none).
    Ctrl-C cancels the turn until its answer is shown (or never, with ``keep``); after it,
    the run is left to the workers and the chat ends (LEFT)."""
    leave = asyncio.Event()
    with TurnView(rt.db, run_id, common.out) as watch, \
            CtrlC(rt.db, run_id, common.out, on_first=watch.stop,
                  keep=lambda: keep or watch.answered, on_keep=leave.set) as ctrl_c:
        run = await rt.drive(run_id, progress=watch.update, stop=leave, drain_s=LEAVE_DRAIN_S)
    if ctrl_c.kept:
        common.out.print(f"the turn's run {run_id} goes on without this chat ({run['status']}): "
                         "a worker (`onebox up` or `onebox worker`) finishes its upkeep; "
                         f"continue with `onebox chat --thread {thread.id}`",
                         markup=False, soft_wrap=True)
        return LEFT
    if watch.answered and run["status"] == "SUCCEEDED":
        common.out.print("the turn's upkeep is done", style="dim")
    elif (panel := answer_panel(run)) is not None:
        common.out.print(panel)
    elif run["status"] != "SUCCEEDED":
        common.out.print(f"the turn ended {run['status']}: {run['error'] or 'no answer'} "
                         f"(`onebox show {run_id}`)", markup=False, soft_wrap=True)
    return "INTERRUPTED" if ctrl_c.pressed else str(run["status"])
