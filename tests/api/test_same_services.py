"""The API and the CLI answer from the same service functions: what one shows, the other
shows too (the CLI run as a user runs it, a subprocess, against the API's database)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from api_helpers import Api

ONEBOX = str(Path(sys.executable).with_name("onebox"))


async def _cli_json(api: Api, db_url: str, *argv: str) -> Any:
    env = {**os.environ, "ONEBOX_HOME": str(api.settings.home), "DATABASE_URL": db_url,
           "ONEBOX_LOG_LEVEL": "ERROR"}
    proc = await asyncio.to_thread(subprocess.run, [ONEBOX, *argv, "--json"], env=env,
                                   capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


async def test_tools_list_and_the_tools_api_show_the_same_catalog(
    api_no_worker: Api, db_url: str,
) -> None:
    async with api_no_worker.client() as c:
        served = (await c.get("/v1/tools")).json()["tools"]
    printed = (await _cli_json(api_no_worker, db_url, "tools", "list"))["tools"]
    assert [t["name"] for t in served] == [t["name"] for t in printed]
    assert len(served) >= 1


async def test_keys_list_shows_the_keys_the_api_authenticates(
    api_no_worker: Api, db_url: str,
) -> None:
    async with api_no_worker.client("acme") as c:
        assert (await c.get("/v1/runs")).status_code == 200
    rows = (await _cli_json(api_no_worker, db_url, "keys", "list"))["keys"]
    assert sorted(r["tenant_id"] for r in rows) == ["acme", "globex"]
    used = [r for r in rows if r["last_used_at"] is not None]
    assert [r["tenant_id"] for r in used] == ["acme"]  # the API's authentication recorded it
