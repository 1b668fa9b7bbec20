"""Examples extracted from README.md and docs/*.md: plans and shell commands.

The rules a doc follows so its examples are tested (tests/docs/test_examples.py):
- A fenced ```yaml or ```json block whose top level has `steps:` is a plan: it is run and must
  end SUCCEEDED. `<!-- doc-test: approve STEP -->` right above it: the run waits for a person,
  and the test approves STEP with `onebox approve RUN STEP` once it waits.
- In ```bash/```sh/```console and unlabelled blocks, each line starting with `onebox ` or `make `
  (after an optional `$ ` prompt) is a command; `export NAME=value` lines before it set its
  environment. In a block with `$ ` prompts, only the prompted lines are commands (the rest is
  output). ```text blocks are diagrams and never run.
- A command line with placeholders (`[...]`, ` | `, `...`, or an UPPERCASE word such as RUN_ID or
  PLAN.yaml) is a synopsis: its command must exist and every `--option` it names must be
  accepted (checked against `--help`). Any other command line runs as written.
- `<!-- doc-test: skip (reason) -->` right above a block: the block cannot run in a test.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```", re.S | re.M)
MARKER = re.compile(r"<!--\s*doc-test:\s*(?P<verb>\w+)\s*(?P<arg>.*?)\s*-->")
COMMAND_LANGS = {"", "bash", "sh", "shell", "console"}
ENV_NAME_VALUE = re.compile(r"--[\w-]*-env\s+[A-Z_][A-Z0-9_]*")
PLACEHOLDER = re.compile(r"\[|\s\|\s|\.\.\.|(?<![\w$-])[A-Z][A-Z_]*(\.yaml)?(?![\w.])")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    lang: str
    body: str
    marker: tuple[str, str] | None  # (verb, argument) of a doc-test marker right above


@dataclass(frozen=True)
class Command:
    block: Block
    text: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True)

    @property
    def is_synopsis(self) -> bool:
        # an environment variable's NAME given to an option (--api-key-env MOONSHOT_API_KEY)
        # is a literal value, not a placeholder
        text = ENV_NAME_VALUE.sub("", self.text.split(" #")[0])
        return bool(PLACEHOLDER.search(text))

    def where(self) -> str:
        return f"{self.block.doc}:{self.block.line}: {self.text}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        above = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.search(above)
        found.append(Block(path.relative_to(ROOT).as_posix(), text[: match.start()].count("\n") + 1,
                           match.group("lang"), match.group("body"),
                           (marker.group("verb"), marker.group("arg")) if marker else None))
    return found


def all_blocks() -> list[Block]:
    return [b for path in DOC_FILES for b in blocks(path)]


def plan_of(block: Block) -> dict[str, object] | None:
    """The plan a yaml/json block holds, or None (a fragment, a tool file, an error body)."""
    if block.lang not in ("yaml", "yml", "json"):
        return None
    data = yaml.safe_load(block.body)  # JSON is YAML
    return data if isinstance(data, dict) and "steps" in data else None


def commands_of(block: Block) -> list[Command]:
    if block.lang not in COMMAND_LANGS:
        return []
    lines = _joined(block.body.splitlines())
    prompted = any(line.startswith("$ ") for line in lines)
    env: dict[str, str] = {}
    found = []
    for raw in lines:
        if prompted and not raw.startswith("$ "):
            continue
        line = raw.removeprefix("$ ").strip()
        if line.startswith("export "):
            env.update(_exports(line))
        elif line.startswith(("onebox ", "make ")):
            found.append(Command(block, line, dict(env)))
    return found


def _joined(lines: list[str]) -> list[str]:
    """Shell lines with their backslash continuations joined, as the shell reads them."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
            continue
        out.append(pending + line.strip() if pending else line)
        pending = ""
    if pending:
        out.append(pending.rstrip())
    return out


def _exports(line: str) -> dict[str, str]:
    words = shlex.split(line, comments=True)[1:]
    return dict(word.split("=", 1) for word in words if "=" in word)
