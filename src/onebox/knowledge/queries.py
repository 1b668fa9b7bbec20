"""Named SQL for the knowledge package, kept as data in ``knowledge/sql/*.sql``.

Each file holds several statements, each introduced by ``-- name: <name>``;
``sql("kb.insert_chunk")`` returns the statement ``insert_chunk`` of ``kb.sql``.
"""

from __future__ import annotations

import functools
from importlib import resources

from onebox.errors import ConfigError


@functools.cache
def _file(stem: str) -> dict[str, str]:
    text = resources.files("onebox.knowledge").joinpath("sql", f"{stem}.sql").read_text()
    statements: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name:"):
            if name:
                statements[name] = "\n".join(lines).strip()
            name, lines = line.split(":", 1)[1].strip(), []
        elif name:
            lines.append(line)
    if name:
        statements[name] = "\n".join(lines).strip()
    return statements


def sql(qualified: str) -> str:
    """The statement ``file.name``."""
    stem, _, name = qualified.partition(".")
    try:
        return _file(stem)[name]
    except (KeyError, FileNotFoundError) as exc:
        raise ConfigError(f"no SQL statement named {qualified!r} in onebox/knowledge/sql") from exc
