"""The layers hold: each package imports only what lies below it.

    api/ cli/ mcp/  ->  runtime/  ->  snapshots/  ->  sandbox/ store/ objects/ llm/
                                    agent/ (pure)
    client/ (the SDK): HTTP only

The sandbox runs code and touches files; it knows nothing of the database, the
runs or the agent. The store is SQL: it neither calls the model nor knows the
agent. The agent's own rule is pinned in test_agent_purity.py (checked here too,
so every package rule lives in one table).

The API owns no SQL: api/ and cli/ call the same service functions (runtime/, knowledge/,
snapshots/), which run the named SQL. api/ takes from onebox.store nothing but types, and
holds no SQL text; cli/ never loads named SQL itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import onebox
from onebox.llm.base import ChatModel
from onebox.llm.embedding import EmbeddingModel

SRC = Path(onebox.__file__).parent
RULES: dict[str, frozenset[str]] = {
    "sandbox": frozenset({"store", "runtime", "agent", "api", "cli", "knowledge", "snapshots"}),
    "store": frozenset({"agent", "llm", "runtime", "api", "cli", "knowledge", "sandbox",
                        "snapshots"}),
    "agent": frozenset({"store", "runtime", "sandbox", "api", "cli", "knowledge", "snapshots",
                        "llm.openai", "llm.registry"}),
    # Front doors call the services, never another door (MCP once reached into api/).
    "mcp": frozenset({"api", "cli"}),
    # The SDK speaks HTTP only: no server module, so `from onebox import Client` stays light.
    "client": frozenset({"store", "runtime", "sandbox", "api", "cli", "knowledge", "snapshots",
                         "agent", "llm", "mcp", "objects"}),
}
MODEL_CALLS = frozenset({"complete", "chat", "embed", "embed_queries", "embed_passages"})


def imported_modules(path: Path, src: Path = SRC) -> set[str]:
    """Every module a file imports, absolute; ``from onebox import store`` counts as onebox.store."""
    package = ".".join(path.relative_to(src.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            names.add(base)
            if (src.parent / base.replace(".", "/")).is_dir():  # names may be submodules
                names.update(f"{base}.{a.name}" for a in node.names)
    return names


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


def forbidden_imports(layer: str, src: Path = SRC) -> list[str]:
    banned = tuple(f"onebox.{name}" for name in RULES[layer])
    return [f"{path.relative_to(src)} imports {module}"
            for path in sorted((src / layer).rglob("*.py"))
            for module in sorted(imported_modules(path, src))
            if any(module == b or module.startswith(b + ".") for b in banned)]


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    assert len(list((SRC / layer).rglob("*.py"))) >= 3
    assert forbidden_imports(layer) == []


def test_the_checker_sees_every_import_form(tmp_path: Path) -> None:
    for package in ("sandbox", "runtime", "store"):
        (tmp_path / "onebox" / package).mkdir(parents=True)
    (tmp_path / "onebox" / "sandbox" / "_layer_probe.py").write_text(
        "from onebox import store\nfrom ..runtime import queue\nimport onebox.agent.plan\n"
        "from onebox.sandbox import policy\nfrom . import base\n", encoding="utf-8")
    found = forbidden_imports("sandbox", tmp_path / "onebox")
    assert found == ["sandbox/_layer_probe.py imports onebox.agent.plan",
                     "sandbox/_layer_probe.py imports onebox.runtime",
                     "sandbox/_layer_probe.py imports onebox.runtime.queue",
                     "sandbox/_layer_probe.py imports onebox.store"]


def model_calls(path: Path) -> list[str]:
    return [f"{path.relative_to(SRC)}:{node.lineno} calls .{node.func.attr}()"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in MODEL_CALLS]


def test_store_calls_no_model() -> None:
    assert all(hasattr(ChatModel, m) or hasattr(EmbeddingModel, m) for m in MODEL_CALLS)
    assert [c for p in sorted((SRC / "store").rglob("*.py")) for c in model_calls(p)] == []


def test_every_rule_names_a_real_package() -> None:
    """A renamed package must not make a rule vacuous."""
    names = {n for banned in RULES.values() for n in banned} | set(RULES)
    missing = [n for n in names if not (SRC / n.replace(".", "/")).is_dir()
               and not (SRC / (n.replace(".", "/") + ".py")).is_file()]
    assert missing == []


# The API may name these store types (to annotate, or to open the pool); nothing else of
# onebox.store: no query loader, no store function.
API_STORE_TYPES = {"onebox.store.db": frozenset({"Database"})}
CLI_STORE_BANNED = frozenset({"onebox.store.queries", "onebox.knowledge.queries"})
SQL_TEXT = re.compile(r"\bSELECT\s+\S|\bINSERT\s+INTO\b|\bUPDATE\s+\S+\s+SET\b"
                      r"|\bDELETE\s+FROM\b|\bWITH\s+\w+\s+AS\s*\(")


def store_imports(path: Path, src: Path = SRC) -> list[tuple[str, str | None]]:
    """(module, name) for each thing a file takes from onebox.store or a query loader;
    name is None for a whole-module import."""
    package = ".".join(path.relative_to(src.parent).with_suffix("").parts[:-1])
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if _is_store(a.name)]
        elif isinstance(node, ast.ImportFrom) and _is_store(base := _absolute(node, package)):
            found += [(base, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and base == "onebox":
            found += [(f"onebox.{a.name}", None) for a in node.names if a.name == "store"]
    return found


def _is_store(module: str) -> bool:
    return module == "onebox.store" or module.startswith("onebox.store.") \
        or module == "onebox.knowledge.queries"


def api_store_leaks(src: Path = SRC) -> list[str]:
    """What api/ takes from onebox.store beyond API_STORE_TYPES."""
    return sorted(f"{path.relative_to(src)} imports {module}{'.' + name if name else ''}"
                  for path in sorted((src / "api").rglob("*.py"))
                  for module, name in store_imports(path, src)
                  if name is None or name not in API_STORE_TYPES.get(module, frozenset()))


def cli_query_loaders(src: Path = SRC) -> list[str]:
    return [f"{path.relative_to(src)} imports {module}"
            for path in sorted((src / "cli").rglob("*.py"))
            for module, _ in store_imports(path, src) if module in CLI_STORE_BANNED]


def sql_strings(src: Path = SRC) -> list[str]:
    """String constants in api/ that read as SQL statements."""
    return [f"{path.relative_to(src)}:{node.lineno} {node.value[:60]!r}"
            for path in sorted((src / "api").rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and SQL_TEXT.search(node.value)]


def test_api_takes_only_types_from_the_store() -> None:
    assert len(list((SRC / "api").rglob("*.py"))) >= 10
    assert api_store_leaks() == []


def test_cli_loads_no_sql_of_its_own() -> None:
    assert cli_query_loaders() == []


def test_api_holds_no_sql_text() -> None:
    assert sql_strings() == []


def test_the_api_has_no_sql_file() -> None:
    assert not (SRC / "store" / "sql" / "api.sql").exists()


def test_the_sql_checkers_see_what_they_look_for(tmp_path: Path) -> None:
    for package in ("api/routes", "cli", "store"):
        (tmp_path / "onebox" / package).mkdir(parents=True)
    (tmp_path / "onebox" / "api" / "routes" / "probe.py").write_text(
        "from onebox.store.db import Database\nfrom onebox.store.queries import load_queries\n"
        "from ...store import api_keys\nfrom onebox import store\n"
        "Q = 'SELECT 1 AS ok'\nR = \"UPDATE onebox.sessions SET x = 1\"\n"
        "DOC = 'the SELECTed rows, updated from the INSERT'\n", encoding="utf-8")
    (tmp_path / "onebox" / "cli" / "probe.py").write_text(
        "import onebox.store.queries\nfrom onebox.store.db import Database\n", encoding="utf-8")
    src = tmp_path / "onebox"
    assert api_store_leaks(src) == ["api/routes/probe.py imports onebox.store",
                                    "api/routes/probe.py imports onebox.store.api_keys",
                                    "api/routes/probe.py imports onebox.store.queries.load_queries"]
    assert cli_query_loaders(src) == ["cli/probe.py imports onebox.store.queries"]
    assert [s.split(" ", 1)[0] for s in sql_strings(src)] == ["api/routes/probe.py:5",
                                                               "api/routes/probe.py:6"]
