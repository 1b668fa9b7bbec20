"""The layers hold: each package imports only what lies below it.

    api/ cli/  ->  runtime/  ->  snapshots/  ->  sandbox/ store/ objects/ llm/
                               agent/ (pure)

The sandbox runs code and touches files; it knows nothing of the database, the
runs or the agent. The store is SQL: it neither calls the model nor knows the
agent. The agent's own rule is pinned in test_agent_purity.py (checked here too,
so every package rule lives in one table).
"""

from __future__ import annotations

import ast
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
