"""Rich renderings of runs and steps, shared by `onebox run`, `show` and `runs`.

Text a run produced (what sandboxed code printed, answers, names, errors) reaches the
operator's terminal through :func:`safe_text`: control sequences are shown escaped, never
interpreted (no clipboard writes, window titles, cleared screens or reordered text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

STATUS_STYLE = {
    "SUCCESS": "green", "SUCCEEDED": "green", "RUNNING": "yellow", "PENDING": "dim",
    "FAILED": "red", "TIMEOUT": "red", "DEAD": "bold red", "CANCELLED": "magenta",
    "WAITING": "cyan",
}
MAX_FAILED_SHOWN = 10
# the tools of the agent's own work (its model calls, code checks, tool lookups): the
# runtime's WORK_TOOLS (a unit test keeps the two equal); `onebox run` shows them with --verbose
AGENT_TOOLS = frozenset({"model", "check", "lookup"})
ENDED_STEP_STATUSES = frozenset({"SUCCESS", "FAILED", "TIMEOUT"})
# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def safe_text(text: str) -> str:
    """``text`` with every terminal control character written out (``\\x1b``, ``\\u202e``);
    tab and newline stay (a Windows line end becomes a newline)."""
    return UNSAFE.sub(_escaped, text.replace("\r\n", "\n"))


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def shown_status(step: dict[str, Any]) -> str:
    """A step's status for people: a queued approval step is WAITING (for a person)."""
    if step["status"] == "PENDING" and step.get("waiting_for") == "approval":
        return "WAITING"
    return str(step["status"])


def is_agent_work(step: dict[str, Any]) -> bool:
    return step["tool_name"] in AGENT_TOOLS


def step_started_line(step: dict[str, Any]) -> str:
    return f"step {step['step_id']} (try {step['attempt']}, {step['tool_name']}): running"


def step_ended_line(step: dict[str, Any]) -> str:
    error = f" ({step['error']})" if step.get("error") else ""
    return f"step {step['step_id']} (try {step['attempt']}): {str(step['status']).lower()}{error}"


def waiting_approvals(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if shown_status(s) == "WAITING"]


def approval_hint(run_id: Any, step_id: str) -> str:
    """The exact commands that decide a waiting step (one line each, never wrapped)."""
    return (f"step {step_id} is WAITING for approval: onebox approve {run_id} {step_id}\n"
            f"  to reject it instead: onebox approve {run_id} {step_id} --reject")


def _num(value: Any, unit: str, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def steps_table(steps: list[dict[str, Any]], *, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    for col, justify in (("#", "right"), ("step", "left"), ("try", "right"), ("tool", "left"),
                         ("status", "left"), ("exit", "right"), ("time", "right"),
                         ("peak mem", "right"), ("cpu", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in steps:
        table.add_row(
            str(s["step_number"]), s["step_id"], str(s["attempt"]), s["tool_name"],
            status_text(shown_status(s)), "-" if s["exit_code"] is None else str(s["exit_code"]),
            _num(s["duration_ms"], " ms", 0), _num(s["memory_used_mb"], " MB"),
            _num(s["cpu_usage_percent"], "%", 0),
        )
    return table


def run_header(run: dict[str, Any]) -> Text:
    text = Text.assemble(
        ("run ", "bold"), (str(run["id"]), "bold cyan"), "  ", status_text(run["status"]),
        f"  {safe_text(run['name'] or '')}  trace {run['trace_id']}",
    )
    lineage = _lineage(run.get("request") or {})
    if lineage:
        text.append(f"\n{lineage}", style="dim")
    if run.get("error"):
        text.append(f"\n{safe_text(run['error'])}", style="red")
    return text


def _lineage(request: dict[str, Any]) -> str | None:
    """Where a fork or a replay came from."""
    fork, replay = request.get("fork"), request.get("replay")
    if isinstance(fork, dict):
        profile = f" with profile {fork['profile']}" if fork.get("profile") else ""
        return f"forked from run {fork.get('run_id')} at step {fork.get('at')}{profile}"
    if isinstance(replay, dict):
        return f"replay of run {replay.get('run_id')}"
    return None


def summary_text(summary: dict[str, Any]) -> Text:
    """Steps per state and the failed steps, one line each (at most MAX_FAILED_SHOWN)."""
    counts = summary["steps"]
    text = Text(f"{sum(counts.values())} steps, {summary['attempts']} attempts: ")
    for i, (status, n) in enumerate(sorted(counts.items())):
        text.append((", " if i else "") + f"{n} ")
        text.append_text(status_text(status))
    for failed in summary["failed"][:MAX_FAILED_SHOWN]:
        text.append(f"\nfailed: {failed['step_id']} (try {failed['attempt']}) "
                    f"{failed['error'] or failed['status']}", style="red")
    for o in (summary.get("overwrites") or [])[:MAX_FAILED_SHOWN]:
        text.append(f"\nfiles: {o['path']} changed by {o['lost']} and {o['kept']} (neither "
                    f"depends on the other): {o['kept']}'s kept, later in the plan",
                    style="yellow")
    return text


def answer_panel(run: dict[str, Any]) -> Panel | None:
    """The run's answer, whole (it is bounded when stored), or None when it has none."""
    if not run.get("answer"):
        return None
    return Panel(Text(safe_text(run["answer"])), title="answer", title_align="left",
                 border_style="green", expand=False)


def timeline(run: dict[str, Any], steps: list[dict[str, Any]], *, tail_lines: int = 6,
             summary: dict[str, Any] | None = None, answer_on_top: bool = True
             ) -> RenderableType:
    """The run's header, its answer (unless ``answer_on_top`` is False: `onebox run` prints
    it last), summary, steps, approvals waiting and output tails."""
    parts: list[RenderableType] = [run_header(run)]
    answer = answer_panel(run) if answer_on_top else None
    if answer is not None:
        parts.append(answer)
    if summary is not None:
        parts.append(summary_text(summary))
    parts.append(steps_table(steps))
    parts += [Text(approval_hint(run["id"], s["step_id"]), style="cyan",
                   no_wrap=True, overflow="ignore")
              for s in waiting_approvals(steps)]
    parts += output_panels(steps, tail_lines)
    return Group(*parts)


def output_panels(steps: list[dict[str, Any]], tail_lines: int = 6) -> list[Panel]:
    """A panel of each attempt's output tails, in the order given; attempts whose tails are
    the same (the same traceback three tries running) share one panel, titled "(xN)"."""
    shown: dict[tuple[str, str], list[str]] = {}
    for s in steps:
        tails = _tails(s, tail_lines)
        if tails != ("", ""):
            shown.setdefault(tails, []).append(f"{s['step_id']} (try {s['attempt']})")
    return [_panel(body, errtail, titles) for (body, errtail), titles in shown.items()]


def _tails(step: dict[str, Any], lines: int) -> tuple[str, str]:
    body = _tail(safe_text(step.get("stdout") or ""), lines)
    errtail = _tail(safe_text(step.get("stderr") or ""), lines)
    if step.get("error") and step["status"] != "SUCCESS":
        errtail = (errtail + "\n" if errtail else "") + f"[{safe_text(step['error'])}]"
    return body, errtail


def _panel(body: str, errtail: str, titles: list[str]) -> Panel:
    content = Text(body)
    if errtail:
        content.append(("\n" if body else "") + errtail, style="red")
    title = titles[0] if len(titles) == 1 else f"{titles[0]} (x{len(titles)})"
    return Panel(content, title=title, title_align="left", border_style="dim", expand=False)


def failure(steps: list[dict[str, Any]], tail_lines: int = 6) -> list[Panel]:
    """The output tails of each step whose last attempt failed, once (its earlier tries
    printed the same, or are in `onebox show`)."""
    last: dict[str, dict[str, Any]] = {}
    for s in steps:
        last[s["step_id"]] = s
    failed = [s for s in last.values() if s["status"] in ("FAILED", "TIMEOUT")]
    return output_panels(failed, tail_lines)


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def runs_table(runs: list[dict[str, Any]], ids: Mapping[Any, str] | None = None) -> Table:
    """The runs, whole ids first; ``ids``: the short unique prefixes a narrow terminal shows
    instead (commands take them), so the name and the error keep room."""
    table = Table(expand=False, box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("run", "status", "name", "ok", "created"):
        table.add_column(col, no_wrap=col != "name", overflow="fold",
                         min_width=10 if col == "name" else None)
    table.add_column("error", overflow="fold", min_width=12)
    when = "%m-%d %H:%M" if ids else "%Y-%m-%d %H:%M:%S"
    for r in runs:
        table.add_row(
            (ids or {}).get(r["id"], str(r["id"])), status_text(r["status"]),
            Text(safe_text(r["name"] or "")), f"{r['steps_succeeded']}",
            r["created_at"].strftime(when), Text(safe_text(r["error"] or "")[:60]),
        )
    return table
