"""The tool catalog on a real PostgreSQL: registration from YAML and the recursive ranking."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from psycopg.types.json import Jsonb

from onebox.errors import Conflict, NotFound, ValidationError
from onebox.runtime.agent.tools import expand_tool_step, lookup_tools, tool_hint
from onebox.store.catalog import (
    get_tool,
    list_tools,
    load_tool_file,
    parse_tool,
    rank_tools,
    register_tool,
    remove_tool,
)
from onebox.store.db import Database

BUILTINS = {"python", "bash", "node", "http", "knowledge_search", "memory_remember",
            "memory_recall", "approval", "final_answer"}


async def record_executions(db: Database, outcomes: dict[str, list[str]]) -> None:
    """Insert finished task_execution rows: tool name -> statuses of its attempts."""
    async with db.transaction() as conn:
        run_id, plan_id = uuid.uuid4(), uuid.uuid4()
        await conn.execute(
            "INSERT INTO onebox.runs (id, trace_id, source, request) VALUES (%s, %s, 'task', %s)",
            (run_id, "0" * 32, Jsonb({"task": "t"})))
        await conn.execute(
            "INSERT INTO onebox.plans (id, run_id, version, spec, spec_hash) "
            "VALUES (%s, %s, 1, '{}', %s)", (plan_id, run_id, "0" * 64))
        n = 0
        for tool, statuses in outcomes.items():
            for status in statuses:
                n += 1
                await conn.execute(
                    "INSERT INTO onebox.task_execution (id, run_id, plan_id, trace_id, step_id,"
                    " step_number, attempt, tool_name, input_hash, status)"
                    " VALUES (%s, %s, %s, %s, %s, %s, 1, %s, %s, %s)",
                    (uuid.uuid4(), run_id, plan_id, "0" * 32, f"s{n}", n, tool, "0" * 64,
                     status))


def pdf_tool(name: str, cost: str = "MEDIUM", requires: tuple[str, ...] = ("python",)) -> dict:
    return {"name": name, "description": f"{name} reads PDFs", "language": "python",
            "code_template": "print({{ path }})", "cost_class": cost, "formats": ["PDF"],
            "requires": list(requires),
            "input_schema": {"type": "object", "required": ["path"]}}


async def test_builtin_tools_are_installed(db: Database) -> None:
    async with db.connection() as conn:
        tools = {t.name: t for t in await list_tools(conn)}
    assert set(tools) >= BUILTINS and all(tools[n].builtin for n in BUILTINS)
    assert tools["http"].cost_class == "MEDIUM" and "json" in tools["http"].formats


async def test_register_from_yaml_and_read_back(db: Database, tmp_path: Path) -> None:
    path = tmp_path / "pdf_tables.yaml"
    path.write_text(
        "name: pdf_tables\ndescription: Extract tables from a PDF\nlanguage: python\n"
        "input_schema: {type: object, required: [path], properties: {path: {type: string}}}\n"
        "code_template: |\n  print('{{ path }}')\npermissions: {network: []}\n"
        "cost_class: MEDIUM\nformats: [pdf, PDF]\nrequires: [python]\n"
        "alternatives: [knowledge_search]\n")
    tool = load_tool_file(path)
    async with db.transaction() as conn:
        await register_tool(conn, tool)
    async with db.connection() as conn:
        stored = await get_tool(conn, "pdf_tables")
    assert stored.formats == ("pdf",) and stored.requires == ("python",)
    assert stored.cost_class == "MEDIUM" and stored.input_schema["required"] == ["path"]
    assert stored.alternatives == ("knowledge_search",) and not stored.builtin


async def test_bad_definitions_are_refused_with_the_field(db: Database) -> None:
    with pytest.raises(ValidationError) as info:
        parse_tool({**pdf_tool("x"), "cost_class": "CHEAP"})
    assert info.value.field == "cost_class"
    with pytest.raises(ValidationError, match="unknown field"):
        parse_tool({**pdf_tool("x"), "colour": "red"})
    with pytest.raises(ValidationError, match="needs a language"):
        parse_tool({"name": "t", "description": "d", "code_template": "x"})
    async with db.transaction() as conn:
        with pytest.raises(Conflict, match="built-in"):
            await register_tool(conn, parse_tool({"name": "python", "description": "mine"}))
    async with db.transaction() as conn:
        with pytest.raises(NotFound, match="ghost"):
            await register_tool(conn, parse_tool(pdf_tool("y", requires=("ghost",))))
    async with db.transaction() as conn:
        with pytest.raises(NotFound):
            await remove_tool(conn, "bash")


async def test_ranking_by_format_cost_and_success_rate(db: Database) -> None:
    async with db.transaction() as conn:
        await register_tool(conn, parse_tool({"name": "ocr", "description": "OCR engine",
                                              "cost_class": "HIGH"}))
        await register_tool(conn, parse_tool(pdf_tool("pdf_fast", "LOW")))
        await register_tool(conn, parse_tool(pdf_tool("pdf_good", "MEDIUM")))
        await register_tool(conn, parse_tool(pdf_tool("pdf_new", "LOW")))
        # cheap itself, but needs the HIGH-cost ocr two levels down
        await register_tool(conn, parse_tool({"name": "scan_helper", "description": "h",
                                              "cost_class": "LOW", "requires": ["ocr"]}))
        await register_tool(conn, parse_tool(pdf_tool("pdf_scan", "LOW",
                                                      requires=("python", "scan_helper"))))
    await record_executions(db, {
        "pdf_fast": ["SUCCESS", "FAILED", "FAILED", "TIMEOUT"],
        "pdf_good": ["SUCCESS"] * 9 + ["FAILED"],
        "pdf_scan": ["SUCCESS"] * 5,
        "python": ["SUCCESS"] * 3,
    })
    async with db.connection() as conn:
        medium = await rank_tools(conn, format="pdf", max_cost="MEDIUM")
        high = await rank_tools(conn, format="PDF", max_cost="HIGH")
        low = await rank_tools(conn, format="pdf", max_cost="LOW")
    # no history scores 1/2; ties go to the cheaper tool, then by name
    assert [t.name for t in medium] == ["pdf_good", "knowledge_search", "pdf_new", "pdf_fast"]
    good = medium[0]
    assert (good.successes, good.runs, good.success_rate) == (9, 10, pytest.approx(0.9))
    assert medium[2].success_rate is None and medium[2].score == pytest.approx(0.5)
    assert medium[3].success_rate == pytest.approx(0.25)
    assert [t.name for t in high][0] == "pdf_scan"
    scan = high[0]
    assert scan.cost_class == "HIGH" and set(scan.requires) == {"python", "scan_helper", "ocr"}
    assert "pdf_scan" not in {t.name for t in low} and "pdf_good" not in {t.name for t in low}
    assert tool_hint(good).success_rate == pytest.approx(0.9)


async def test_requirement_cycles_and_removed_requirements(db: Database) -> None:
    async with db.transaction() as conn:
        await register_tool(conn, parse_tool({"name": "a", "description": "a",
                                              "formats": ["xyz"]}))
        await register_tool(conn, parse_tool({"name": "b", "description": "b",
                                              "formats": ["xyz"], "requires": ["a"]}))
        await register_tool(conn, parse_tool({"name": "a", "description": "a",
                                              "formats": ["xyz"], "requires": ["b"]}))
    async with db.connection() as conn:
        assert {t.name for t in await rank_tools(conn, format="xyz")} == {"a", "b"}
    async with db.transaction() as conn:
        await register_tool(conn, parse_tool({"name": "c", "description": "c",
                                              "formats": ["xyz"], "requires": ["b"]}))
        await remove_tool(conn, "a")  # b now needs a tool that no longer exists
    async with db.connection() as conn:
        ranked = {t.name for t in await rank_tools(conn, format="xyz")}
    assert ranked == set()  # b needs a (gone); c needs b, which needs a
    with pytest.raises(ValidationError):
        async with db.connection() as conn:
            await rank_tools(conn, format="xyz", max_cost="CHEAP")


async def test_lookup_tools_answers_the_agent_over_all_formats(db: Database) -> None:
    from onebox.agent.actions import Decision, LookupTools

    await record_executions(db, {"python": ["SUCCESS"] * 4, "http": ["FAILED"] * 4})
    action = LookupTools("a3", Decision("lookup", "why"), formats=("csv", "html"),
                         capabilities=("python",))
    async with db.connection() as conn:
        result = await lookup_tools(conn, action, max_cost="MEDIUM")
    names = [t.name for t in result.tools]
    assert result.action_id == "a3" and names[0] == "python"
    assert names.index("http") > names.index("node")  # 0/4 ranks below no history
    assert len(names) == len(set(names))
    assert result.tools[0].success_rate == 1.0 and result.tools[0].runs == 4


def test_a_tool_step_expands_to_code_with_json_literals() -> None:
    from onebox.agent.plan import parse_plan

    tool = parse_tool({**pdf_tool("pdf_tables"), "permissions": {"network": ["docs.example"]},
                       "code_template": "path = {{ path }}\npages = {{ pages }}\n"})
    plan = parse_plan({"steps": [{"id": "t", "kind": "tool", "allow_domains": ["a.example"],
                                  "input": {"name": "pdf_tables", "path": "it's.pdf",
                                            "pages": [1, 2]}}]})
    step = expand_tool_step(tool, plan.step("t"))
    assert (step.kind, step.tool) == ("code", "python")
    assert step.code == 'path = "it\'s.pdf"\npages = [1, 2]\n'
    assert step.allow_domains == ("a.example", "docs.example")
    missing = parse_plan({"steps": [{"id": "t", "kind": "tool", "input": {"name": "x"}}]})
    with pytest.raises(ValidationError) as info:
        expand_tool_step(tool, missing.step("t"))
    assert info.value.field == "steps[t].input.path"


def test_tools_declared_by_installed_packages_are_found(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from onebox.store.catalog import tools_from_entry_points

    dist = tmp_path / "acme_tools-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tools\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[onebox.tools]\nxlsx = acme_tools:XLSX\nfactory = acme_tools:make\n")
    (tmp_path / "acme_tools.py").write_text(
        "XLSX = {'name': 'xlsx_read', 'description': 'read spreadsheets', 'formats': ['xlsx']}\n"
        "def make():\n    return {'name': 'acme_fetch', 'description': 'fetch', "
        "'cost_class': 'HIGH'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tools = {t.name: t for t in tools_from_entry_points()}
    assert tools["xlsx_read"].formats == ("xlsx",)
    assert tools["acme_fetch"].cost_class == "HIGH"
