"""A run's files: `onebox run --file` places files in the workspace before the first step
and records them as inputs; a run's deliverables are kept after its workspace is gone."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import sys
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.errors import PlanError, ValidationError
from onebox.objects import blob_key
from onebox.runtime.engine import run_files, run_outputs
from onebox.runtime.engine.retention import RetentionRule, collect
from onebox.runtime.services.service import Runtime
from onebox.snapshots.archive import collect_garbage
from onebox.store.db import Database

READS = {"name": "reads-inputs", "steps": [
    {"id": "read", "tool": "bash", "code": "cat data.csv; cat reports/q1.txt; ls reports"},
]}
WRITES = {"name": "writes-report", "steps": [
    {"id": "one", "tool": "bash", "code": "echo draft > draft.txt"},
    {"id": "two", "tool": "bash", "depends_on": ["one"],
     "code": "mkdir -p out && printf 'total,3\\n' > out/report.csv && echo '# R' > report.md"},
]}


def _env(settings: Settings) -> dict[str, str]:
    return {"ONEBOX_HOME": str(settings.home), "ONEBOX_SANDBOX__BACKEND": "process",
            "ONEBOX_DATABASE_URL": settings.database_url.get_secret_value()}  # type: ignore[union-attr]


async def onebox(settings: Settings, *args: str) -> tuple[int, str, str]:
    """The CLI as a user runs it: a new process (a foreground run handles Ctrl-C)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from onebox.cli.main import main; main()", *args,
        env={**os.environ, **_env(settings)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def rt(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.1, 0.2
    runtime = Runtime(settings, db, get_backend(settings))
    yield runtime
    await runtime.backend.close()


@pytest.fixture
def given(tmp_path: Path) -> Path:
    (tmp_path / "data.csv").write_text("region,sales\nnorth,3\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "q1.txt").write_text("q1 was fine\n")
    return tmp_path


async def test_run_with_files_the_step_reads_them_and_they_are_recorded(
        db: Database, settings: Settings, given: Path) -> None:
    plan = given / "plan.yaml"
    plan.write_text(json.dumps(READS))
    code, out, err = await onebox(settings, "run", str(plan), "--file", str(given / "data.csv"),
                                  "--file", str(given / "reports") + "/", "--json")
    assert code == 0, err
    doc = json.loads(out)
    run_id = doc["run"]["id"]
    step = doc["steps"][0]
    assert step["stdout"] == "region,sales\nnorth,3\nq1 was fine\nq1.txt\n"
    rows = {r["path"]: r for r in await run_files.listed(db, run_id, "input")}
    assert sorted(rows) == ["data.csv", "reports/q1.txt"]
    data = (given / "data.csv").read_bytes()
    assert rows["data.csv"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert rows["data.csv"]["size_bytes"] == len(data)


async def test_an_agent_scheduled_plan_gets_its_files_too(rt: Runtime, given: Path) -> None:
    plan = parse_plan({"name": "when", "steps": [
        {"id": "read", "tool": "bash", "code": "cat data.csv", "when": "1 == 1"}]})
    inputs = await run_files.stage_local(rt.db, rt.objects, [given / "data.csv"], rt.settings.runtime)
    submitted = await rt.submit(plan, inputs=inputs)
    final = await rt.drive(submitted.run_id)
    assert final["status"] == "SUCCEEDED"
    async with rt.db.connection() as conn:
        cur = await conn.execute("SELECT stdout FROM onebox.task_execution WHERE run_id = %s "
                                 "AND step_id = 'read'", (submitted.run_id,))
        assert [r["stdout"] for r in await cur.fetchall()] == ["region,sales\nnorth,3\n"]


async def test_too_many_or_too_big_files_are_refused_naming_the_field(
        settings: Settings, given: Path) -> None:
    settings.runtime.max_input_files = 1
    with pytest.raises(ValidationError, match="at most 1") as too_many:
        run_files.local_files([given / "data.csv", given / "reports"], settings.runtime)
    assert too_many.value.field == "file"
    settings.runtime.max_input_files, settings.runtime.max_input_bytes = 10, 1024
    (given / "big.bin").write_bytes(b"x" * 2048)
    with pytest.raises(ValidationError, match="MAX_INPUT_BYTES"):
        run_files.local_files([given / "big.bin"], settings.runtime)


async def test_cli_refuses_a_missing_file_before_anything_runs(
        db: Database, settings: Settings, given: Path) -> None:
    plan = given / "plan.yaml"
    plan.write_text(json.dumps(READS))
    code, _out, err = await onebox(settings, "run", str(plan), "--file", str(given / "nope"))
    assert code != 0 and "no such file" in err
    async with db.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM onebox.runs")
        assert (await cur.fetchone())["n"] == 0  # type: ignore[index]


async def test_outputs_are_kept_after_the_workspace_is_released(rt: Runtime) -> None:
    submitted = await rt.submit(parse_plan(WRITES))
    final = await rt.drive(submitted.run_id)
    assert final["status"] == "SUCCEEDED"
    assert not rt.backend.workspace(f"run-{submitted.run_id}").exists()
    kept = await run_outputs.manifest(rt.db, submitted.run_id)
    assert [(f["path"], f["step_id"]) for f in kept] == [("out/report.csv", "two"),
                                                         ("report.md", "two")]
    assert kept[0]["sha256"] == hashlib.sha256(b"total,3\n").hexdigest()
    assert kept[0]["size_bytes"] == 8 and kept[0]["execution_id"]
    data = await run_outputs.artifact(rt.db, rt.objects, submitted.run_id, "report.md")
    assert data == b"# R\n"
    blob = await run_outputs.artifacts_zip(rt.db, rt.objects, submitted.run_id)
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        listed = json.loads(archive.read("manifest.json"))["files"]
        assert [f["path"] for f in listed] == ["out/report.csv", "report.md"]
        assert archive.read("files/out/report.csv") == b"total,3\n"


async def test_files_cli_lists_gets_and_zips_the_outputs(
        rt: Runtime, settings: Settings, tmp_path: Path) -> None:
    submitted = await rt.submit(parse_plan(WRITES))
    await rt.drive(submitted.run_id)
    run = str(submitted.run_id)
    code, out, err = await onebox(settings, "files", run, "--json")
    assert code == 0, err
    assert [f["path"] for f in json.loads(out)["files"]] == ["out/report.csv", "report.md"]
    code, out, err = await onebox(settings, "files", run, "--get", "out/report.csv")
    assert code == 0 and out == "total,3\n", err
    code, out, err = await onebox(settings, "files", run, "--zip", str(tmp_path / "o.zip"))
    assert code == 0, err
    with zipfile.ZipFile(tmp_path / "o.zip") as archive:
        assert "manifest.json" in archive.namelist()
    code, _out, err = await onebox(settings, "files", run, "--get", "../etc/passwd")
    assert code != 0 and "path" in err


async def _backdate(db: Database, run_id: object, days: float) -> None:
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE onebox.runs SET created_at = created_at - make_interval(days => %(d)s), "
            "finished_at = finished_at - make_interval(days => %(d)s) WHERE id = %(id)s",
            {"d": days, "id": run_id})


async def test_retention_removes_a_runs_files_and_keeps_blobs_another_run_names(
        rt: Runtime) -> None:
    rt.settings.snapshot_policy = "never"  # no snapshot shares the blobs: run_files alone
    plan = {"name": "w", "steps": [{"id": "w", "tool": "bash",
                                    "code": "echo shared > s.txt; echo $RANDOM$$ > own.txt"}]}
    old = await rt.submit(parse_plan(plan))
    await rt.drive(old.run_id)
    new = await rt.submit(parse_plan(plan))
    await rt.drive(new.run_id)
    kept = {f["path"]: f["sha256"] for f in await run_outputs.manifest(rt.db, old.run_id)}
    await _backdate(rt.db, old.run_id, 60)
    await collect(rt.db, rt.objects, RetentionRule(max_age_s=30 * 86400.0))
    assert await run_outputs.manifest(rt.db, old.run_id) == []
    assert await rt.objects.exists(blob_key(kept["s.txt"]))  # the new run names it too
    assert not await rt.objects.exists(blob_key(kept["own.txt"]))
    assert await run_outputs.artifact(rt.db, rt.objects, new.run_id, "s.txt") == b"shared\n"


async def test_snapshot_gc_keeps_the_blobs_of_runs_files(rt: Runtime, given: Path) -> None:
    rt.settings.snapshot_policy = "never"  # no snapshot shares the blobs: run_files alone
    inputs = await run_files.stage_local(rt.db, rt.objects, [given / "data.csv"],
                                         rt.settings.runtime)
    submitted = await rt.submit(parse_plan(WRITES), inputs=inputs)
    await rt.drive(submitted.run_id)
    await collect_garbage(rt.db, rt.objects)
    for f in await run_outputs.manifest(rt.db, submitted.run_id):
        assert await rt.objects.exists(blob_key(f["sha256"])), f["path"]
    assert await rt.objects.exists(blob_key(inputs[0].sha256))


DECLARED = {"name": "declared", "outputs": ["out/*.csv", "report.md"], "steps": [
    {"id": "one", "tool": "bash",
     "code": "mkdir -p out && echo a > out/a.csv && echo b > out/b.txt && echo r > report.md"},
    {"id": "two", "tool": "bash", "depends_on": ["one"], "code": "echo s > scratch.csv"},
]}


async def test_a_plans_declared_outputs_are_kept_with_the_step_that_wrote_them(
        rt: Runtime) -> None:
    submitted = await rt.submit(parse_plan(DECLARED))
    assert (await rt.drive(submitted.run_id))["status"] == "SUCCEEDED"
    kept = await run_outputs.manifest(rt.db, submitted.run_id)
    assert [(f["path"], f["step_id"]) for f in kept] == [("out/a.csv", "one"),
                                                         ("report.md", "one")]


@pytest.mark.parametrize("bad", ["../up.csv", "/etc/passwd", ".onebox/x", ""])
def test_declared_outputs_outside_the_workspace_are_refused(bad: str) -> None:
    with pytest.raises(PlanError) as refused:
        parse_plan({**DECLARED, "outputs": [bad]})
    assert refused.value.field == "outputs[0]"
