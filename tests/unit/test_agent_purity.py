"""agent/ imports no I/O package: it yields actions, the runtime performs them."""

from __future__ import annotations

import ast
from pathlib import Path

import onebox.agent

FORBIDDEN = {"psycopg", "psycopg_pool", "subprocess", "httpx", "openai", "socket", "asyncio",
             "requests", "urllib.request", "http", "onebox.store", "onebox.runtime",
             "onebox.sandbox", "onebox.llm.openai", "onebox.llm.registry"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_agent_package_imports_no_io_package() -> None:
    files = sorted(Path(onebox.agent.__file__).parent.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for module in imported_modules(path):
            hits = {f for f in FORBIDDEN if module == f or module.startswith(f + ".")}
            assert not hits, f"{path.name} imports {module}"
