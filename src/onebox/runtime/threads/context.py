"""What a thread's turn sees: a context built from memory, not from the whole history.

:func:`build_context` is pure (no database, no model, no clock): given the profile's
instructions, the thread's rolling summary, the memories recalled for the message, the last
turns and the workspace's files, it fills a token budget in a fixed order of priority and
returns every part with its token count. The I/O that gathers those inputs lives in
:mod:`onebox.runtime.threads.service`; a bench feeds this function directly.

Priority when the budget is short (each part is cut or dropped, never the message):
the message, the instructions, the newest turn, the recalled memories, the summary, the
older recent turns, the files.

Recalled memories are of two kinds: facts the upkeep extracted, and episodes (a turn's own
words, stored as it ended). They come ranked by recall; they take at most
``memory_tokens`` (a share of the budget, :data:`MEMORY_SHARE`), best first, without
repeats (the same text twice, an episode of a turn already verbatim in the recent turns; a
turn is told once: a fact of a turn whose episode is in stays out, and so does the episode
of a turn with a fact in), and are listed oldest first under a heading for each day (the
date once, not on every line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from onebox.llm.embedding import estimate_tokens

DEFAULT_BUDGET_TOKENS = 4000
RECENT_TURNS = 4
MAX_LISTED_FILES = 50
MEMORY_SHARE = 0.45  # of the budget, at most, for recalled memories (bench: >= 5x at turn 300)
PART_ORDER = ("instructions", "summary", "memories", "recent", "files", "message")
TITLES = {"summary": "Summary of the earlier conversation",
          "memories": "Remembered from earlier turns, oldest first under the date of each "
                      "(facts, and turns verbatim)",
          "recent": "The last turns, verbatim", "files": "Files in the workspace",
          "message": "The user's message (answer this)"}


@dataclass(frozen=True)
class Turn:
    """One earlier turn: what the user said and what the agent answered."""

    number: int
    message: str
    answer: str | None = None


@dataclass(frozen=True)
class RecalledMemory:
    """A memory recalled for the message, with the date it became true."""

    id: str
    content: str
    valid_from: datetime
    turn: int | None = None
    episode: bool = False  # the turn's own words, not an extracted fact


@dataclass(frozen=True)
class ContextPart:
    """One part of the context: its text, its token count and what it was built from
    (memory ids, turn numbers, file paths, the summary version)."""

    name: str
    text: str
    tokens: int
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Context:
    parts: tuple[ContextPart, ...]
    budget_tokens: int
    summary_version: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # part -> items left out
    episodes: tuple[str, ...] = ()  # the recalled memories that are turns verbatim

    @property
    def total_tokens(self) -> int:
        return sum(p.tokens for p in self.parts)

    def part(self, name: str) -> ContextPart | None:
        return next((p for p in self.parts if p.name == name), None)

    def render(self, *, skip: Sequence[str] = ("instructions",)) -> str:
        """The context as the task text of the turn's run. The profile's instructions are
        skipped by default: every model call of the run gets them as its system prompt."""
        ordered = sorted(self.parts, key=lambda p: PART_ORDER.index(p.name))
        return "\n\n".join(f"## {TITLES.get(p.name, p.name)}\n{p.text}" for p in ordered
                           if p.name not in skip and p.text)

    def to_record(self) -> dict[str, Any]:
        """What is stored per turn (``thread_turns.context``): ids and counts, not text."""
        return {"budget_tokens": self.budget_tokens, "total_tokens": self.total_tokens,
                "summary_version": self.summary_version, "dropped": dict(self.dropped),
                "episodes": list(self.episodes),
                "parts": {p.name: {"tokens": p.tokens, "sources": list(p.sources)}
                          for p in self.parts}}


def build_context(
    *, message: str, instructions: str = "", summary: str = "", summary_version: int = 0,
    memories: Sequence[RecalledMemory] = (), recent: Sequence[Turn] = (),
    files: Sequence[tuple[str, int | None]] = (), budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    recent_turns: int = RECENT_TURNS, memory_tokens: int | None = None,
    per_day: int | None = None, turn_once: bool = True,
) -> Context:
    """The turn's context within ``budget_tokens`` (see the module docstring for the order);
    the memories take at most ``memory_tokens`` (default: :data:`MEMORY_SHARE` of it), at
    most ``per_day`` turns of a day before the rest (see :func:`pick_memories`)."""
    fill = _Filler(budget_tokens)
    fill.whole("message", message.strip(), ())
    fill.clipped("instructions", instructions.strip(), ())
    newest = list(recent)[-recent_turns:] if recent_turns > 0 else []
    turns = fill.items("recent", [(_turn_text(t), f"turn:{t.number}") for t in newest[-1:]])
    cap = int(budget_tokens * MEMORY_SHARE) if memory_tokens is None else memory_tokens
    picked = pick_memories(memories, {t.number for t in newest}, min(cap, fill.left), per_day,
                           turn_once)
    fill.dropped["memories"] = len(memories) - len(picked)
    fill.items("memories", _dated(picked))
    fill.clipped("summary", summary.strip(), (f"summary:v{summary_version}",) if summary else ())
    older = [(_turn_text(t), f"turn:{t.number}") for t in reversed(newest[:-1])]
    fill.items("recent", older, before=turns)
    fill.items("files", [(f"- {p}" + (f" ({s} bytes)" if s is not None else ""), p)
                         for p, s in list(files)[:MAX_LISTED_FILES]])
    shown = fill.parts["memories"].sources if "memories" in fill.parts else ()
    return Context(tuple(fill.parts.values()), budget_tokens, summary_version,
                   {k: v for k, v in fill.dropped.items() if v},
                   tuple(m.id for m in picked if m.episode and m.id in shown))


def pick_memories(memories: Sequence[RecalledMemory], verbatim_turns: set[int],
                  cap_tokens: int, per_day: int | None = None,
                  turn_once: bool = True) -> list[RecalledMemory]:
    """The recalled memories that go in, best first while ``cap_tokens`` lasts, without
    repeats; returned oldest first (by date, then turn). With ``per_day``, a first pass
    takes at most that many turns of each day, so a question whose answer is spread over
    several days is not crowded out by near-repeats of one; a second pass fills what is
    left of the share with the rest, still best first. With ``turn_once`` (the default) a
    turn is told by its best-ranked memory kind: its episode, or its facts, not both."""
    pick = _Picker(set(verbatim_turns), cap_tokens, turn_once)
    deferred = [m for m in memories if not pick.add(m, per_day)]
    for m in deferred if per_day is not None else ():
        pick.add(m, None)
    return sorted(pick.picked, key=lambda m: (m.valid_from, m.turn or 0))


class _Picker:
    """The memories taken so far, the tokens left and what makes a repeat."""

    def __init__(self, told: set[int], cap_tokens: int, turn_once: bool = True) -> None:
        self.turn_once = turn_once  # an episode stays out when a fact of its turn is in
        self.left = cap_tokens
        self.picked: list[RecalledMemory] = []
        self.seen: set[str] = set()
        self.told = told  # turns whose words are in already (their facts may go in)
        self.said: set[int] = set()  # turns whose episode went in (their facts are left out)
        self.noted: set[int] = set()  # turns with a fact in
        self.days: dict[str, set[object]] = {}  # each day's turns; its heading written once

    def add(self, m: RecalledMemory, per_day: int | None) -> bool:
        """Take ``m`` if it is no repeat and fits; False when only the day's limit kept it
        out (it may go in on a later pass)."""
        key = " ".join(m.content.split()).lower()
        if key in self.seen or m.turn in (self.told if m.episode else self.said):
            return True
        if self.turn_once and m.episode and m.turn in self.noted:
            return True
        day, turn = _day(m), m.turn if m.turn is not None else m.id
        turns = self.days.get(day, set())
        if per_day is not None and turn not in turns and len(turns) >= per_day:
            return False
        tokens = estimate_tokens(_memory_text(m)) + 1
        tokens += 0 if day in self.days else estimate_tokens(day) + 1
        if tokens <= self.left:
            self.left -= tokens
            self.days.setdefault(day, set()).add(turn)
            self.seen.add(key)
            self.picked.append(m)
            if m.episode and m.turn is not None:
                self.said.add(m.turn)
            elif m.turn is not None:
                self.noted.add(m.turn)
        return True


def _turn_text(turn: Turn) -> str:
    answer = (turn.answer or "(no answer)").strip()
    return f"Turn {turn.number}, user: {turn.message.strip()}\nTurn {turn.number}, agent: {answer}"


def _day(memory: RecalledMemory) -> str:
    return f"({memory.valid_from.date().isoformat()})"


def _dated(picked: Sequence[RecalledMemory]) -> list[tuple[str, str]]:
    """The memories (oldest first) as items, each day's heading before its first one."""
    items, last = [], ""
    for m in picked:
        day = _day(m)
        items.append((_memory_text(m) if day == last else f"{day}\n{_memory_text(m)}", m.id))
        last = day
    return items


def _memory_text(memory: RecalledMemory) -> str:
    if memory.episode:
        said = "\n  ".join(line.strip() for line in memory.content.strip().splitlines())
        return f"- turn {memory.turn}: {said}"
    return f"- {memory.content.strip()}"


class _Filler:
    """Adds parts while the budget lasts; counts what it had to leave out."""

    def __init__(self, budget_tokens: int) -> None:
        self.left = budget_tokens
        self.parts: dict[str, ContextPart] = {}
        self.dropped: dict[str, int] = {}

    def whole(self, name: str, text: str, sources: tuple[str, ...]) -> None:
        tokens = estimate_tokens(text)
        self.left -= tokens
        self.parts[name] = ContextPart(name, text, tokens, sources)

    def clipped(self, name: str, text: str, sources: tuple[str, ...]) -> None:
        if not text or self.left <= 0:
            self.dropped[name] = int(bool(text))
            return
        if estimate_tokens(text) > self.left:  # keep the head: ~4 characters a token
            text = text[: self.left * 4].rstrip() + " [...]"
            while text and estimate_tokens(text) > self.left:
                text = text[: int(len(text) * 0.9)]
            self.dropped[name] = 1
        self.whole(name, text, sources)

    def items(self, name: str, items: Sequence[tuple[str, str]],
              before: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
        """Add items while they fit; ``before`` are items of the same part added earlier
        (older turns go in front of them). Returns the part's items."""
        kept: list[tuple[str, str]] = []
        for text, source in items:
            tokens = estimate_tokens(text) + 1
            if tokens > self.left:
                self.dropped[name] = self.dropped.get(name, 0) + 1
                continue
            self.left -= tokens
            kept.append((text, source))
        every = [*reversed(kept), *before] if before else kept
        if every:
            text = "\n".join(t for t, _ in every)
            self.parts[name] = ContextPart(name, text, estimate_tokens(text),
                                           tuple(s for _, s in every))
        return every
