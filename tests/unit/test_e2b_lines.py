"""Printed output reaches a reader in whole lines, whatever the pipe reads delivered:
`print` writes its text and its newline separately, and a loaded machine can hand them over
in two reads. E2B clients get one message per line; the onebox NDJSON stream (the SDK's
``on_stdout``) gets the whole lines of a read in one event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from onebox.runtime.services.cell_stream import by_lines


async def _feed(events: list[dict[str, Any] | float]) -> AsyncIterator[dict[str, Any]]:
    for event in events:
        if isinstance(event, float):
            await asyncio.sleep(event)
        else:
            yield event


async def _regrouped(events: list[dict[str, Any] | float], partial_s: float = 10.0,
                     split: bool = True) -> list[tuple[str, str]]:
    return [(e["type"], e.get("text", ""))
            async for e in by_lines(_feed(events), partial_s, split=split)]


def out(text: str) -> dict[str, Any]:
    return {"type": "stdout", "text": text}


def err(text: str) -> dict[str, Any]:
    return {"type": "stderr", "text": text}


async def test_a_line_split_over_two_reads_is_one_message() -> None:
    got = await _regrouped([out("go seen"), out("\n"), {"type": "done", "result": {}}])
    assert got == [("stdout", "go seen\n"), ("done", "")]


async def test_one_read_of_many_lines_is_many_messages() -> None:
    got = await _regrouped([out("a\nb\nc")])
    assert got == [("stdout", "a\n"), ("stdout", "b\n"), ("stdout", "c")]


async def test_a_partial_line_goes_out_after_a_pause_and_before_anything_else() -> None:
    got = await _regrouped([out("progress 10%"), 0.2, out(" 20%\n")], partial_s=0.05)
    assert got == [("stdout", "progress 10%"), ("stdout", " 20%\n")]
    got = await _regrouped([out("50%"), err("warn\n"), {"type": "result", "data": {}}])
    assert got == [("stdout", "50%"), ("stderr", "warn\n"), ("result", "")]


async def test_unsplit_the_lines_of_a_read_stay_one_event_and_never_half_a_line() -> None:
    got = await _regrouped([out("42"), out("\n"), out("a\nb"), out("c\nd\n"),
                            {"type": "end", "result": {}}], split=False)
    assert got == [("stdout", "42\n"), ("stdout", "a\n"), ("stdout", "bc\nd\n"), ("end", "")]
    got = await _regrouped([out("50%"), 0.2, out(" 60%\n")], partial_s=0.05, split=False)
    assert got == [("stdout", "50%"), ("stdout", " 60%\n")]  # a progress bar still shows
