"""The layers hold: each package imports only what lies below it, and no module imports
itself back through others (no import circle, counting imports inside functions).

    api/ cli/ mcp/  ->  runtime/  ->  knowledge/ snapshots/  ->  sandbox/ store/ objects/ llm/
                                    agent/ (pure)
    client/ (the SDK): HTTP only; with onebox/__init__.py and errors.py it is also the
    client-only distribution (clients/python), so those files import only each other

Inside runtime/, the rooms (each package's docstring says what it owns):

    services  e2b  ->  threads  ->  agent  ->  engine  ->  environments  models

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
import sys
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
    # Knowledge and snapshots are services below the runtime: they never reach up into it.
    "knowledge": frozenset({"runtime", "api", "cli", "mcp", "snapshots"}),
    "snapshots": frozenset({"runtime", "api", "cli", "mcp", "agent", "knowledge", "llm"}),
    # The runtime's rooms: the engine knows none of its users (they plug in as step kinds
    # and chores, the onebox.step_kinds / onebox.chores entry points).
    "runtime/engine": frozenset({"runtime.agent", "runtime.threads", "runtime.services",
                                 "runtime.e2b"}),
    "runtime/agent": frozenset({"runtime.threads", "runtime.services", "runtime.e2b"}),
    "runtime/threads": frozenset({"runtime.services", "runtime.e2b"}),
    "runtime/e2b": frozenset({"runtime.agent", "runtime.threads"}),
    "runtime/models": frozenset({"runtime.engine", "runtime.agent", "runtime.threads",
                                 "runtime.services", "runtime.e2b", "runtime.environments"}),
    "runtime/environments": frozenset({"runtime.engine", "runtime.agent", "runtime.threads",
                                       "runtime.services", "runtime.e2b", "runtime.models"}),
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
    banned = tuple(f"onebox.{name.replace('/', '.')}" for name in RULES[layer])
    return [f"{path.relative_to(src)} imports {module}"
            for path in sorted((src / layer).rglob("*.py"))
            for module in sorted(imported_modules(path, src))
            if any(module == b or module.startswith(b + ".") for b in banned)]


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    assert len(list((SRC / layer).rglob("*.py"))) >= 3
    assert forbidden_imports(layer) == []


def test_the_client_distribution_ships_a_closed_set_of_files() -> None:
    """clients/python links __init__.py, errors.py, py.typed and client/: what they import is
    the standard library, httpx and each other, so the wheel works without the server."""
    shipped = SRC.parents[1] / "clients" / "python" / "onebox"
    links = {p.name: p.resolve() for p in shipped.iterdir()}
    assert links == {"__init__.py": SRC / "__init__.py", "errors.py": SRC / "errors.py",
                     "py.typed": SRC / "py.typed", "client": SRC / "client"}
    files = [SRC / "__init__.py", SRC / "errors.py", *sorted((SRC / "client").glob("*.py"))]
    inside = {"onebox", "onebox.errors", "onebox.client",
              *(f"onebox.client.{p.stem}" for p in files[2:])}
    def other_module(name: str) -> bool:  # `from onebox.client import Client` names a class
        path = SRC.parent / name.replace(".", "/")
        return name not in inside and (path.is_dir() or path.with_suffix(".py").is_file()
                                       or not name.startswith("onebox"))

    outside = sorted(f"{p.relative_to(SRC)} imports {m}" for p in files
                     for m in imported_modules(p) if other_module(m)
                     and m.split(".")[0] not in (*sys.stdlib_module_names, "httpx"))
    assert outside == []


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
    names = {n.replace("/", ".") for banned in RULES.values() for n in banned} | \
        {n.replace("/", ".") for n in RULES}
    missing = [n for n in names if not (SRC / n.replace(".", "/")).is_dir()
               and not (SRC / (n.replace(".", "/") + ".py")).is_file()]
    assert missing == []


def test_every_runtime_module_lives_in_a_room() -> None:
    """A new runtime module lands in a room (and so under its rule), not beside them."""
    assert sorted(p.name for p in (SRC / "runtime").glob("*.py")) == ["__init__.py"]
    rooms = [p for p in (SRC / "runtime").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert rooms and all((room / "__init__.py").read_text(encoding="utf-8").startswith('"""')
                         for room in rooms)
    assert {f"runtime/{room.name}" for room in rooms} - {"runtime/services"} <= set(RULES)


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the onebox modules it imports (anywhere in the file: functions and
    TYPE_CHECKING blocks included), a package's own __init__ aside."""
    modules = {}
    for path in src.rglob("*.py"):
        rel = path.relative_to(src.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for module in imported_modules(path, src):
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module and module != name and not name.startswith(module + "."):
                deps.add(module)
        graph[name] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, deps = work[-1]
            for dep in deps:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                    break
                if dep in on_stack:
                    low[node] = min(low[node], index[dep])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        circles.append(sorted(group))
    return circles


def test_no_import_circle_anywhere() -> None:
    graph = import_graph()
    found = [" <-> ".join(group) + ": " + "; ".join(
        f"{a} imports {b}" for a in group for b in sorted(graph[a] & set(group)))
        for group in import_circles(graph)]
    assert found == []


def test_the_circle_finder_finds_one_through_a_function_import(tmp_path: Path) -> None:
    (tmp_path / "onebox" / "pkg").mkdir(parents=True)
    (tmp_path / "onebox" / "pkg" / "a.py").write_text("from onebox.pkg import b\n")
    (tmp_path / "onebox" / "pkg" / "b.py").write_text("def f():\n    from onebox.pkg.c import x\n")
    (tmp_path / "onebox" / "pkg" / "c.py").write_text("import onebox.pkg.a\n")
    (tmp_path / "onebox" / "pkg" / "d.py").write_text("from onebox.pkg import a\n")
    graph = import_graph(tmp_path / "onebox")
    assert import_circles(graph) == [["onebox.pkg.a", "onebox.pkg.b", "onebox.pkg.c"]]


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
