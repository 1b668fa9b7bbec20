"""One idempotency namespace per tenant, whichever door a request comes through: the same key
from the CLI and the API is one run; the same key with a different request is a 409 that names
the key and the run that holds it."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import Api
from click.testing import CliRunner

from onebox.agent.plan import parse_plan
from onebox.cli.main import main
from onebox.config import Settings
from onebox.errors import Conflict
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.submit import Submitted
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.submission import submit_plan

PLAN = {"name": "idem", "steps": [{"id": "a", "tool": "bash", "code": "echo one"}]}
OTHER = {"name": "idem", "steps": [{"id": "a", "tool": "bash", "code": "echo two"}]}
RACE_ROUNDS = 200


async def _default_tenant(api: Api) -> httpx.AsyncClient:
    """A client of tenant 'default', the tenant the CLI submits for."""
    key = (await create_key(api.rt.db, tenant_id="default", name="default-test"))[0]
    return httpx.AsyncClient(base_url=api.url, timeout=30,
                             headers={"Authorization": f"Bearer {key}"})


async def _cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    """`onebox ...` in-process (in a thread: the CLI runs its own event loop)."""
    env = {"ONEBOX_HOME": str(settings.home), "ONEBOX_SANDBOX__BACKEND": "process",
           "ONEBOX_DATABASE_URL": settings.database_url.get_secret_value()}  # type: ignore[union-attr]
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


async def _run_count(api: Api) -> int:
    row = await api.rt.db.fetchone("SELECT count(*) AS n FROM onebox.runs")
    assert row is not None
    return int(row["n"])


def _plan_file(tmp_path: Path, plan: dict[str, Any]) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


async def test_the_same_key_from_the_cli_and_the_api_is_one_run(
    api_no_worker: Api, tmp_path: Path,
) -> None:
    code, out, err = await _cli(api_no_worker.settings, "run", str(_plan_file(tmp_path, PLAN)),
                                "--detach", "--json", "--idempotency-key", "nightly-1")
    assert code == 0, err
    from_cli = json.loads(out)
    async with await _default_tenant(api_no_worker) as c:
        r = await c.post("/v1/runs", json={"plan": PLAN}, headers={"Idempotency-Key": "nightly-1"})
        assert r.status_code == 200, r.text
        assert r.json()["run_id"] == from_cli["run_id"] and r.json()["existing"] is True
        detail = (await c.get(f"/v1/runs/{from_cli['run_id']}")).json()
    assert detail["run"]["idempotency_key"] == "nightly-1"
    code, out, _ = await _cli(api_no_worker.settings, "run", str(_plan_file(tmp_path, PLAN)),
                              "--detach", "--json", "--idempotency-key", "nightly-1")
    assert code == 0 and json.loads(out)["run_id"] == from_cli["run_id"]
    assert await _run_count(api_no_worker) == 1


async def test_a_key_reused_with_a_different_plan_is_a_409_naming_key_and_run(
    api_no_worker: Api,
) -> None:
    async with api_no_worker.client() as c:
        first = await c.post("/v1/runs", json={"plan": PLAN, "idempotency_key": "k-7"})
        assert first.status_code == 201, first.text
        run_id = first.json()["run_id"]
        again = await c.post("/v1/runs", json={"plan": OTHER, "idempotency_key": "k-7"})
        renamed = await c.post("/v1/runs", json={"plan": PLAN, "name": "other name",
                                                 "idempotency_key": "k-7"})
        same = await c.post("/v1/runs", json={"plan": PLAN}, headers={"Idempotency-Key": "k-7"})
    for refused in (again, renamed):
        assert refused.status_code == 409, refused.text
        body = refused.json()
        assert body["code"] == "conflict" and body["field"] == "idempotency_key"
        assert "k-7" in body["message"] and run_id in body["message"]
    assert same.status_code == 200 and same.json()["run_id"] == run_id
    assert await _run_count(api_no_worker) == 1


async def test_the_cli_refuses_a_key_reused_with_a_different_plan(
    api_no_worker: Api, tmp_path: Path,
) -> None:
    async with await _default_tenant(api_no_worker) as c:
        r = await c.post("/v1/runs", json={"plan": PLAN, "idempotency_key": "from-api"})
        run_id = r.json()["run_id"]
    code, out, err = await _cli(api_no_worker.settings, "run", str(_plan_file(tmp_path, OTHER)),
                                "--detach", "--idempotency-key", "from-api")
    assert code != 0 and out == ""
    assert "from-api" in err and run_id in err and "Traceback" not in err
    assert await _run_count(api_no_worker) == 1


async def test_a_task_and_a_plan_with_one_key_conflict(api_no_worker: Api) -> None:
    db, settings = api_no_worker.rt.db, api_no_worker.settings
    run_id, existing = await submit_task(db, "count the rows", idempotency_key="t-1")
    assert (await submit_task(db, "count the rows", idempotency_key="t-1")) == (run_id, True)
    with pytest.raises(Conflict, match=str(run_id)):
        await submit_task(db, "count the columns", idempotency_key="t-1")
    with pytest.raises(Conflict, match="t-1"):
        await submit_plan(db, settings, parse_plan(PLAN), idempotency_key="t-1")
    assert not existing


async def test_cli_and_api_racing_on_one_key_make_one_run(api_no_worker: Api) -> None:
    """The CLI's submit (the runtime function it calls) and an HTTP submit at the same time,
    same key: one run, both callers get it; a different plan racing for a key gets a 409."""
    db, settings = api_no_worker.rt.db, api_no_worker.settings
    plan = parse_plan(PLAN)
    async with await _default_tenant(api_no_worker) as c:
        for i in range(RACE_ROUNDS):
            key = f"race-{i}"
            cli, http = await asyncio.gather(
                submit_plan(db, settings, plan, idempotency_key=key),
                c.post("/v1/runs", json={"plan": PLAN if i % 2 else OTHER,
                                         "idempotency_key": key}), return_exceptions=True)
            assert not isinstance(http, BaseException), http
            if i % 2:
                assert isinstance(cli, Submitted), cli
                assert http.status_code in (200, 201), http.text
                assert uuid.UUID(http.json()["run_id"]) == cli.run_id
                assert http.json()["existing"] != cli.existing
            else:  # the loser of the race is refused, whichever it was: exactly one wins
                cli_won = isinstance(cli, Submitted)
                assert cli_won or isinstance(cli, Conflict), cli
                assert http.status_code == (409 if cli_won else 201), http.text
    assert await _run_count(api_no_worker) == RACE_ROUNDS
