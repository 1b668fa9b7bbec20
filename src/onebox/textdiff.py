"""Unified diffs whose cost is bounded before they are computed (one rule for every diff a
request or a replay shows).

    text, cut = unified(old, new, "a/out.txt", "b/out.txt", max_chars=20_000)

difflib's matcher is quadratic in the lines it compares (two 10,000-line outputs differing
on every other line took 5 s; it ran on the API server's event loop). Here the lines both
texts start and end with are set aside first (linear), and the matcher sees at most
``WINDOW_LINES`` lines of each side of what is left: the diff of a longer middle shows its
beginning, says it was cut, and never shows a hunk the window could have cut short. The
hunk headers count lines in the whole texts. Lines without a final newline get one (as
difflib's output is joined here), so the text is always whole lines.
"""

from __future__ import annotations

import difflib
import re

WINDOW_LINES = 1000
CONTEXT = 3
_HUNK = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@")


def unified(old: str, new: str, fromfile: str, tofile: str, *,
            max_chars: int) -> tuple[str, bool]:
    """``(diff, cut)``: the unified diff of ``old`` and ``new`` ("" when equal), at most
    ``max_chars`` long, and whether anything was left out (see the module)."""
    if old == new:
        return "", False
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    head = _common_head(a, b)
    tail = _common_tail(a, b, head)
    start = max(0, head - CONTEXT)
    end_a, end_b = len(a) - tail, len(b) - tail
    windowed = end_a - head > WINDOW_LINES or end_b - head > WINDOW_LINES
    if windowed:  # only the window's beginning is compared
        stop_a, stop_b = min(end_a, head + WINDOW_LINES), min(end_b, head + WINDOW_LINES)
    else:
        stop_a, stop_b = min(len(a), end_a + CONTEXT), min(len(b), end_b + CONTEXT)
    hunks = _hunks(a[start:stop_a], b[start:stop_b], start)
    if windowed and len(hunks) > 1:
        hunks = hunks[:-1]  # the last one may run on past the window
    out = [f"--- {fromfile}\n", f"+++ {tofile}\n"]
    size, cut = len(out[0]) + len(out[1]), windowed
    for hunk in hunks:
        for line in hunk:
            if size + len(line) > max_chars:
                return "".join(out), True
            out.append(line)
            size += len(line)
    return "".join(out), cut


def _common_head(a: list[str], b: list[str]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_tail(a: list[str], b: list[str], head: int) -> int:
    n = min(len(a), len(b)) - head
    i = 0
    while i < n and a[len(a) - 1 - i] == b[len(b) - 1 - i]:
        i += 1
    return i


def _hunks(a: list[str], b: list[str], offset: int) -> list[list[str]]:
    """difflib's hunks of ``a`` and ``b`` (slices starting ``offset`` lines into the
    texts), with their headers counted in the whole texts."""
    hunks: list[list[str]] = []
    for line in difflib.unified_diff(a, b, n=CONTEXT, lineterm="\n"):
        if line.startswith(("---", "+++")) and not hunks:
            continue
        found = _HUNK.match(line)
        if found:
            old_at, old_n, new_at, new_n = found.groups()
            hunks.append([f"@@ -{int(old_at) + offset}{old_n} "
                          f"+{int(new_at) + offset}{new_n} @@\n"])
            continue
        hunks[-1].append(line if line.endswith("\n") else line + "\n")
    return hunks
