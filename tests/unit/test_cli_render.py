"""What the CLI's renderings decide on their own: which steps are the agent's work, and
which output panels are repeats."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from onebox.cli.render import AGENT_TOOLS, failure, output_panels
from onebox.runtime.agent.engine import WORK_TOOLS

TRACEBACK = "Traceback (most recent call last):\nValueError: boom\n"


def attempt(step_id: str, n: int, status: str = "FAILED", stderr: str = TRACEBACK,
            **fields: Any) -> dict[str, Any]:
    return {"step_id": step_id, "attempt": n, "status": status, "stdout": "", "stderr": stderr,
            "error": "exited with status 1" if status == "FAILED" else None, **fields}


def rendered(panels: list[Any]) -> str:
    console = Console(width=100, record=True)
    for panel in panels:
        console.print(panel)
    return console.export_text()


def test_the_cli_knows_the_agent_tools_the_runtime_uses() -> None:
    assert frozenset(WORK_TOOLS.values()) == AGENT_TOOLS


def test_identical_tails_share_one_panel_counted() -> None:
    text = rendered(output_panels([attempt("make", 1), attempt("make", 2), attempt("make", 3),
                                   attempt("other", 1, stderr="another error\n")]))
    assert text.count("ValueError: boom") == 1 and "make (try 1) (x3)" in text
    assert "another error" in text


def test_the_failure_is_each_failed_steps_last_attempt_once() -> None:
    steps = [attempt("make", 1, stderr="first\n"), attempt("make", 2, stderr="second\n"),
             attempt("ok", 1, status="SUCCESS", stderr="")]
    text = rendered(failure(steps))
    assert "second" in text and "first" not in text and "ok (try" not in text
