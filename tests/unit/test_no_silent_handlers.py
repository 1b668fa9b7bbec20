"""No exception disappears without a trace: every broad handler in src/onebox re-raises, or logs
the exception (``log.exception(...)`` or ``exc_info=...``; the logging ContextFilter adds the
run's trace id), or carries ``# swallow-ok: <reason>`` on its ``except`` line.

Broad means ``except:``, ``except Exception``, ``except BaseException`` (alone or in a tuple),
``contextlib.suppress(Exception)``/``suppress(BaseException)``, and an ``except OSError`` whose
body only passes, continues or bare-returns (the silent swallow; ``return None`` from a
function documented to answer None when a file is gone is a value, not a swallow)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "onebox"
BROAD = {"Exception", "BaseException"}
LOG_METHODS = {"debug", "info", "warning", "error", "critical", "exception", "log"}
MARK = "# swallow-ok:"


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(SRC.parent)}:{self.line}: {self.what}"


def _names(node: ast.expr | None) -> set[str]:
    """The exception class names an ``except`` clause (or a suppress call) names."""
    if node is None:
        return {"<bare>"}
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    return {item.attr if isinstance(item, ast.Attribute) else getattr(item, "id", "?")
            for item in items}


def _logs_exception(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in LOG_METHODS:
        return False
    target = ast.unparse(func.value).lower()
    if "log" not in target:
        return False
    return func.attr == "exception" or any(k.arg == "exc_info" for k in call.keywords)


def _handled(body: list[ast.stmt]) -> bool:
    """The handler re-raises or logs the exception it caught."""
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and _logs_exception(node)):
            return True
    return False


def _silent(body: list[ast.stmt]) -> bool:
    """Only pass, ``...``, continue, break or a bare ``return`` (an explicit ``return None``
    is a value the caller is told to expect: "None if it is gone")."""
    def quiet(stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.Pass | ast.Continue | ast.Break):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return True
        return isinstance(stmt, ast.Return) and stmt.value is None
    return all(quiet(stmt) for stmt in body)


def _marked(lines: list[str], line: int) -> bool:
    """``# swallow-ok: <reason>`` (a reason, not just the mark) on the line or the one above."""
    for text in lines[max(line - 2, 0):line]:
        if MARK in text and text.split(MARK, 1)[1].strip():
            return True
    return False


def _findings(path: Path) -> Iterator[Finding]:
    source = path.read_text()
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ExceptHandler):
            names = _names(node.type)
            broad = bool(names & (BROAD | {"<bare>"}))
            swallow = "OSError" in names and _silent(node.body)
            if (broad or swallow) and not _handled(node.body) and not _marked(lines, node.lineno):
                yield Finding(path, node.lineno, f"except {'/'.join(sorted(names))} swallows")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("suppress"):
            names = set().union(*(_names(arg) for arg in node.args)) if node.args else set()
            if names & BROAD and not _marked(lines, node.lineno):
                yield Finding(path, node.lineno, f"suppress({'/'.join(sorted(names))})")


def _all_findings() -> list[Finding]:
    return [f for path in sorted(SRC.rglob("*.py")) for f in _findings(path)]


def test_no_broad_handler_swallows_an_exception_silently() -> None:
    found = _all_findings()
    assert not found, (
        "broad exception handlers that neither re-raise nor log the exception (use "
        "log.exception(...) or exc_info=True, narrow the except, or mark a legitimate case "
        "with '# swallow-ok: <reason>'):\n" + "\n".join(map(str, found)))


def _check(snippet: str, tmp_path: Path) -> list[Finding]:
    path = tmp_path / "onebox" / "m.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(snippet)
    return [Finding(p.path, p.line, p.what) for p in _findings(path)]


def test_the_checker_catches_what_it_should(tmp_path: Path) -> None:
    bad = [
        "try:\n    f()\nexcept Exception:\n    pass\n",
        "try:\n    f()\nexcept:\n    x = 1\n",
        "try:\n    f()\nexcept (ValueError, BaseException) as e:\n    log.warning('%s', e)\n",
        "try:\n    f()\nexcept OSError:\n    pass\n",
        "def skip():\n    try:\n        f()\n    except OSError:\n        return\n",
        "with contextlib.suppress(Exception):\n    f()\n",
        "try:\n    f()\nexcept Exception:  # swallow-ok:\n    pass\n",
    ]
    good = [
        "try:\n    f()\nexcept Exception:\n    log.exception('f failed')\n",
        "try:\n    f()\nexcept Exception as e:\n    logger.warning('f: %s', e, exc_info=e)\n",
        "try:\n    f()\nexcept BaseException:\n    cleanup()\n    raise\n",
        "try:\n    f()\nexcept OSError as e:\n    return e.errno\n",
        "def gone():\n    try:\n        f()\n    except OSError:\n        return None\n",
        "try:\n    f()\nexcept Exception:  # swallow-ok: best effort in a finalizer\n    pass\n",
        "with contextlib.suppress(FileNotFoundError):\n    f()\n",
    ]
    assert [len(_check(s, tmp_path)) for s in bad] == [1] * len(bad)
    assert [len(_check(s, tmp_path)) for s in good] == [0] * len(good)
