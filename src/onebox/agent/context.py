"""What the model is shown about a step: its environment, its inputs, and what failed.

Pure text building, bounded everywhere: the sandbox's Python version and packages (measured
by the runtime, passed in as :class:`SandboxFacts`), the workspace's files, the shape of
the inputs, each dependency's output once (head and tail kept to a budget), and for a
failed run the exit code, the tail of stderr and the failing line of a traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onebox.agent.actions import StepResult

MAX_LISTED_PACKAGES = 200
MAX_LISTED_FILES = 50
MAX_SHAPE_KEYS = 20
TRACEBACK_LINE = re.compile(r'File "([^"]+)", line (\d+)')
LIBRARY_PATH = re.compile(r"/lib/python\d|site-packages|dist-packages|^<frozen")


@dataclass(frozen=True)
class SandboxFacts:
    """The sandbox's Python as measured by running it: version and installed packages."""

    python_version: str
    packages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"python_version": self.python_version, "packages": list(self.packages)}


def environment_text(facts: SandboxFacts | None, files: Mapping[str, int | None]) -> str:
    """Python version, packages and workspace files, one bounded paragraph."""
    lines = []
    if facts is not None:
        shown = facts.packages[:MAX_LISTED_PACKAGES]
        more = len(facts.packages) - len(shown)
        packages = ", ".join(shown) or "none beyond the standard library"
        lines.append(f"Python {facts.python_version}; installed packages (nothing else can be "
                     f"imported beyond the standard library): {packages}"
                     + (f" (+{more} more)" if more > 0 else ""))
    lines.append("Files in the workspace (the working directory): " + files_text(files))
    return "\n".join(lines)


def files_text(files: Mapping[str, int | None]) -> str:
    if not files:
        return "(none)"
    names = sorted(files)
    shown = [f"{n} ({files[n]} bytes)" if files[n] is not None else n
             for n in names[:MAX_LISTED_FILES]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def shape(value: Any) -> str:
    """Type, length, keys, and for a table (a list of objects) its columns."""
    if isinstance(value, Mapping):
        keys = list(value)[:MAX_SHAPE_KEYS]
        return f"object with {len(value)} keys {keys}"
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, Mapping) for v in value):
            columns = list(dict.fromkeys(k for row in value for k in row))[:MAX_SHAPE_KEYS]
            return f"table of {len(value)} rows, columns {columns}"
        kinds = sorted({type(v).__name__ for v in value})
        return f"list of {len(value)} items ({', '.join(kinds) or 'empty'})"
    if isinstance(value, str):
        return f"string of {len(value)} characters"
    return type(value).__name__


def summarise(text: str, budget_bytes: int) -> str:
    """``text`` within ``budget_bytes``: head and tail kept, the bytes left out counted."""
    data = text.encode()
    if len(data) <= budget_bytes:
        return text
    half = max(budget_bytes // 2, 1)
    head = data[:half].decode(errors="ignore")
    tail = data[-half:].decode(errors="ignore")
    return f"{head}\n...[{len(data) - 2 * half} bytes left out]...\n{tail}"


def dependency_text(deps: Mapping[str, Mapping[str, Any] | None], budget_bytes: int) -> str:
    """Each dependency once: its declared result if it has one, else its stdout."""
    if not deps:
        return "(none)"
    each = max(budget_bytes // len(deps), 200)
    parts = []
    for step_id, output in deps.items():
        output = output or {}
        result = output.get("result")
        if result is not None:
            body = json.dumps(result, default=str, indent=1, ensure_ascii=False)
            parts.append(f"- {step_id}: result ({shape(result)}):\n{summarise(body, each)}")
        else:
            stdout = str(output.get("stdout") or "")
            parts.append(f"- {step_id}: stdout ({len(stdout.encode())} bytes):\n"
                         f"{summarise(stdout, each)}")
    return "\n".join(parts)


def inputs_shape(deps: Mapping[str, Mapping[str, Any] | None],
                 loop: Mapping[str, Any], documents: Mapping[str, str] | None = None) -> str:
    """One line per input the code reads from $ONEBOX_INPUTS."""
    lines = [f'- deps["{d}"]["result"]: {shape((o or {}).get("result"))}'
             for d, o in deps.items()]
    lines += [f'- "{k}": {shape(v)}' for k, v in loop.items()]
    lines += [f'- documents["{name}"]: "{path}", the path of the knowledge document '
              "whole (its original text, every row), to open and read"
              for name, path in (documents or {}).items()]
    return "\n".join(lines) or "(no inputs)"


def failure_text(obs: StepResult, code: str = "", stderr_bytes: int = 1500) -> str:
    """What went wrong: exit code, the failing line of a traceback, the tail of stderr."""
    if obs.timed_out:
        head = "timed out"
    elif obs.exit_code is not None:
        head = f"exit code {obs.exit_code}"
    else:
        head = "failed"
    parts = [head]
    where = failing_line(obs.stderr, code)
    if where:
        parts.append(where)
    stderr = obs.stderr.strip()
    if stderr:
        parts.append("stderr (last part):\n" + tail(stderr, stderr_bytes))
    elif obs.error or obs.stdout:
        parts.append(tail((obs.error or obs.stdout).strip(), stderr_bytes))
    return "\n".join(parts)


def failing_line(stderr: str, code: str) -> str | None:
    """The last ``File ..., line N`` of a traceback outside the standard library and
    installed packages (else the last one), with line N of ``code`` for the step's own file."""
    found = TRACEBACK_LINE.findall(stderr[-20_000:])
    if not found:
        return None
    own = [f for f in found if not LIBRARY_PATH.search(f[0])]
    path, number = (own or found)[-1]
    n = int(number)
    lines = code.splitlines()
    source = f": {lines[n - 1].strip()}" if own and code and 0 < n <= len(lines) else ""
    return f"failing line: {path}, line {n}{source}"


def tail(text: str, limit_bytes: int) -> str:
    data = text.encode()
    if len(data) <= limit_bytes:
        return text
    return f"...[{len(data) - limit_bytes} bytes before]...\n" + \
        data[-limit_bytes:].decode(errors="ignore")


def workspace_files(names: Sequence[str], sizes: Sequence[int | None]) -> dict[str, int | None]:
    return {n: (sizes[i] if i < len(sizes) else None) for i, n in enumerate(names)}
