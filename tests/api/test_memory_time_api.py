"""When a memory happened, over HTTP (body `happened_at`) and the CLI (`--at`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from api_helpers import Api
from click.testing import CliRunner

from onebox.cli.main import main


async def _cli(api: Api, *args: str) -> tuple[int, str]:
    env = {"ONEBOX_HOME": str(api.settings.home), "ONEBOX_SANDBOX__BACKEND": "process",
           "ONEBOX_DATABASE_URL": api.settings.database_url.get_secret_value()}  # type: ignore[union-attr]
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)
    return result.exit_code, result.output


async def test_api_stores_and_returns_happened_at(kapi: Api) -> None:
    async with kapi.client() as c:
        made = await c.post("/v1/memory", json={
            "scope": "diary", "content": "Caroline: I went to a support group yesterday.",
            "happened_at": "1:56 pm on 8 May, 2023"})
        assert made.status_code == 201, made.text
        record = made.json()
        assert record["happened_at"].startswith("2023-05-07")
        assert record["happened_precision"] == "day"
        recalled = (await c.post("/v1/memory/recall", json={
            "scope": "diary", "query": "When did Caroline go to the support group?"})).json()
        hit: dict[str, Any] = recalled["memories"][0]
        assert hit["id"] == record["id"] and hit["when"].startswith("on 7 May 2023 (")
        bad = await c.post("/v1/memory", json={"scope": "diary", "content": "x happened",
                                               "happened_at": "around teatime"})
        assert bad.status_code == 422, bad.text
        assert bad.json()["field"] == "happened_at" and "ISO 8601" in bad.text
        browse = (await c.get("/v1/memory", params={"scope": "diary"})).json()
        assert [m["id"] for m in browse["memories"]] == [record["id"]]


async def test_cli_at_option_and_a_bad_date(kapi: Api) -> None:
    code, out = await _cli(kapi, "memory", "remember", "We moved to Lisbon two years ago.",
                           "-s", "home", "--at", "2023-05-08", "--json")
    assert code == 0, out
    made = json.loads(out)
    code, out = await _cli(kapi, "memory", "recall", "when did we move to Lisbon?", "-s", "home")
    assert code == 0 and made["id"] in out and "in 2021 (" in out
    code, out = await _cli(kapi, "memory", "remember", "Something.", "-s", "home",
                           "--at", "next-ish")
    assert code == 2 and "happened_at" in out and "2023-05-08" in out
