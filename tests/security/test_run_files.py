"""A run's files cannot reach outside their workspace or their tenant.

Input names cannot climb out of the workspace (``..``, absolute, ``.onebox/``), artifact
paths cannot name anything but a kept output, a symlink that sandboxed code planted in the
workspace is never followed when its outputs are collected (the host reads as root), and
one tenant cannot read another tenant's artifacts or name its uploads."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from onebox.agent.plan import parse_plan
from onebox.api import create_app
from onebox.config import Settings
from onebox.errors import ValidationError
from onebox.runtime.engine import run_files, run_outputs
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

SECRET = "host-secret-7c1e\n"


@pytest.fixture
async def rt(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.1, 0.2
    runtime = Runtime(settings, db, get_backend(settings))
    yield runtime
    await runtime.backend.close()
    await runtime.objects.close()


@pytest.fixture
async def clients(rt: Runtime) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    app = create_app(rt.settings, runtime=rt)
    transport = httpx.ASGITransport(app=app)
    out = {}
    for tenant in ("acme", "globex"):
        key = (await create_key(rt.db, tenant_id=tenant, name=f"{tenant}-files"))[0]
        out[tenant] = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                        headers={"Authorization": f"Bearer {key}"})
    yield out
    for client in out.values():
        await client.aclose()


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/cron.d/x", "a/../../x", "..\\..\\x",
                                  ".onebox/s1.result.json", "a\x00b", "", ".", "x" * 600])
def test_input_names_that_leave_the_workspace_are_refused(name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        run_files.check_name(name)
    assert refused.value.field == "files"


async def test_an_upload_named_to_climb_out_is_a_422_naming_files(
        clients: dict[str, httpx.AsyncClient]) -> None:
    sent = await clients["acme"].post("/v1/uploads", files=[
        ("files", ("../../etc/cron.d/evil", b"* * * * * root id\n", "text/plain"))])
    assert sent.status_code == 422 and sent.json()["field"] == "files", sent.text


async def test_a_planted_symlink_is_not_followed_when_outputs_are_kept(
        rt: Runtime, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    os.chmod(tmp_path, 0o755)
    plan = parse_plan({"name": "plant", "steps": [{"id": "plant", "tool": "bash", "code": (
        f"ln -s {secret} leak.txt; ln -s /etc/shadow shadow.txt; mkdir d; "
        f"ln -s {tmp_path} d/up; echo real > real.txt")}]})
    submitted = await rt.submit(plan)
    assert (await rt.drive(submitted.run_id))["status"] == "SUCCEEDED"
    async with rt.db.connection() as conn:
        cur = await conn.execute("SELECT details FROM onebox.task_execution WHERE run_id = %s",
                                 (submitted.run_id,))
        written = {f["path"] for f in (await cur.fetchone())["details"]["files_written"]}  # type: ignore[index]
    assert {"leak.txt", "shadow.txt", "real.txt"} <= written  # the probe reaches the collector
    kept = await run_outputs.manifest(rt.db, submitted.run_id)
    assert [f["path"] for f in kept] == ["real.txt"]
    with pytest.raises(Exception, match="kept no output"):
        await run_outputs.artifact(rt.db, rt.objects, submitted.run_id, "leak.txt")
    async with rt.db.connection() as conn:
        cur = await conn.execute("SELECT payload FROM onebox.agent_events WHERE run_id = %s AND "
                                 "type = 'outputs_kept'", (submitted.run_id,))
        skipped = (await cur.fetchone())["payload"]["skipped"]  # type: ignore[index]
    assert {"leak.txt", "shadow.txt"} <= set(skipped)
    assert SECRET.strip() not in json.dumps(kept)


async def test_artifact_paths_name_only_kept_outputs(
        rt: Runtime, clients: dict[str, httpx.AsyncClient]) -> None:
    plan = {"name": "one", "steps": [{"id": "w", "tool": "bash", "code": "echo ok > ok.txt"}]}
    run_id = (await clients["acme"].post("/v1/runs", json={"plan": plan})).json()["run_id"]
    await rt.drive(uuid.UUID(run_id))
    acme = clients["acme"]
    assert (await acme.get(f"/v1/runs/{run_id}/artifacts/ok.txt")).content == b"ok\n"
    for path in ("..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "../../../etc/passwd",
                 ".onebox/s1.result.json", "ok.txt%00"):
        got = await acme.get(f"/v1/runs/{run_id}/artifacts/{path}")
        assert got.status_code in (400, 404, 422), (path, got.status_code)  # 400: dot segments
        assert b"root:" not in got.content


async def test_another_tenant_cannot_read_artifacts_or_name_uploads(
        rt: Runtime, clients: dict[str, httpx.AsyncClient]) -> None:
    acme, globex = clients["acme"], clients["globex"]
    upload = (await acme.post("/v1/uploads", files=[
        ("files", ("in.txt", b"acme only\n", "text/plain"))])).json()["uploads"][0]
    plan = {"name": "copy", "steps": [{"id": "c", "tool": "bash", "code": "cp in.txt out.txt"}]}
    run_id = (await acme.post("/v1/runs", json={"plan": plan, "files": [upload["id"]]})
              ).json()["run_id"]
    assert (await rt.drive(uuid.UUID(run_id)))["status"] == "SUCCEEDED"
    assert (await acme.get(f"/v1/runs/{run_id}/artifacts/out.txt")).content == b"acme only\n"
    for url in (f"/v1/runs/{run_id}/artifacts", f"/v1/runs/{run_id}/artifacts/out.txt",
                f"/v1/runs/{run_id}/artifacts?zip=1"):
        got = await globex.get(url)
        assert got.status_code == 404 and b"acme only" not in got.content, url
    stolen = await globex.post("/v1/runs", json={"plan": plan, "files": [upload["id"]]})
    assert stolen.status_code == 404 and stolen.json()["field"] == "files"


async def test_a_declared_glob_never_matches_through_a_planted_symlink(
        rt: Runtime, tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text(SECRET)
    os.chmod(tmp_path, 0o755)
    plan = parse_plan({"name": "glob", "outputs": ["*", "*/*", "out/**"], "steps": [
        {"id": "plant", "tool": "bash", "code": (
            f"mkdir out; ln -s {secret} out/leak.csv; ln -s {tmp_path} out/up; "
            "ln -s /etc etc; echo real > out/real.csv")}]})
    submitted = await rt.submit(plan)
    assert (await rt.drive(submitted.run_id))["status"] == "SUCCEEDED"
    kept = await run_outputs.manifest(rt.db, submitted.run_id)
    assert [f["path"] for f in kept] == ["out/real.csv"]
