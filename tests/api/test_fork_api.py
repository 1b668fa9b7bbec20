"""POST /v1/runs/{id}/fork and the SDK's runs.fork: the same fork as `onebox fork`."""

from __future__ import annotations

import asyncio

import pytest
from api_helpers import Api, wait_status

PLAN = {"steps": [
    {"id": "a", "tool": "bash", "code": "echo a > f.txt"},
    {"id": "b", "tool": "bash", "code": "echo b >> f.txt", "depends_on": ["a"]},
    {"id": "c", "tool": "bash", "code": "cat f.txt", "depends_on": ["b"]},
]}


async def test_fork_over_http_keeps_a_and_reruns_b_with_the_change(api: Api) -> None:
    async with api.client() as client, api.client("globex") as other:
        run = (await client.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        await wait_status(client, run, "SUCCEEDED")
        assert (await other.post(f"/v1/runs/{run}/fork", json={"at": "b"})).status_code == 404
        bad = await client.post(f"/v1/runs/{run}/fork", json={"at": "b", "set": {"b": 1}})
        assert bad.status_code == 422 and bad.json()["field"] == "set"
        made = await client.post(f"/v1/runs/{run}/fork",
                                 json={"at": "b", "set": {"b.code": "echo B >> f.txt"}})
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["inherited"] == ["a"] and body["rerun"] == ["b", "c"]
        detail = await wait_status(client, body["run_id"], "SUCCEEDED")
        steps = {s["step_id"]: s for s in detail["steps"]}
        assert steps["c"]["stdout"] == "a\nB\n"
        assert detail["run"]["request"]["fork"] == {"run_id": run, "at": "b"}


async def test_the_sdk_forks(api: Api) -> None:
    from onebox.client import Client

    async with api.client() as client:
        run = (await client.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        await wait_status(client, run, "SUCCEEDED")

    def fork() -> dict:
        with Client(api.url, api_key=api.keys["acme"]) as sdk:
            return dict(sdk.runs.fork(run, "c", set={"c.code": "wc -l < f.txt"}))

    made = await asyncio.to_thread(fork)
    assert made["inherited"] == ["a", "b"]
    async with api.client() as client:
        detail = await wait_status(client, made["run_id"], "SUCCEEDED")
    assert {s["step_id"]: s for s in detail["steps"]}["c"]["stdout"].strip() == "2"


async def test_replay_and_compare_over_http(api: Api) -> None:
    async with api.client() as client, api.client("globex") as other:
        run = (await client.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        await wait_status(client, run, "SUCCEEDED")
        replayed = await client.post(f"/v1/runs/{run}/replay")
        assert replayed.status_code == 200, replayed.text
        assert (replayed.json()["matches"], replayed.json()["model_calls"]) == (3, 0)
        assert (await other.post(f"/v1/runs/{run}/replay")).status_code == 404
        made = (await client.post(f"/v1/runs/{run}/fork", json={
            "at": "b", "set": {"b.code": "echo B >> f.txt"}})).json()
        await wait_status(client, made["run_id"], "SUCCEEDED")
        found = (await client.get(f"/v1/runs/{run}/compare/{made['run_id']}")).json()
        assert found["first_difference"] == "b" and found["differing"] == ["b", "c"]
        assert (await other.get(f"/v1/runs/{run}/compare/{made['run_id']}")).status_code == 404


async def test_a_replay_longer_than_the_servers_wait_is_followed_to_its_report(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The POST answers 202 with the report so far when the replay run outlives `wait_s`;
    the SDK then follows the run and reads its report."""
    from onebox.client import Client, spec

    async with api.client() as client, api.client("globex") as other:
        run = (await client.post("/v1/runs", json={"plan": {"name": "slowish", "steps": [
            {"id": "s", "tool": "bash", "code": "sleep 1.5; echo ok"}]}})).json()["run_id"]
        await wait_status(client, run, "SUCCEEDED")
        early = await client.post(f"/v1/runs/{run}/replay", params={"wait_s": 0})
        assert early.status_code == 202, early.text
        assert early.json()["status"] in ("PENDING", "RUNNING")
        assert early.json()["steps"][0]["match"] is None
        replay_id = early.json()["replay_run_id"]
        await wait_status(client, replay_id, "SUCCEEDED")
        report = (await client.get(f"/v1/runs/{replay_id}/replay-report")).json()
        assert (report["status"], report["matches"], report["replayed"]) == ("SUCCEEDED", 1, 1)
        assert (await other.get(f"/v1/runs/{replay_id}/replay-report")).status_code == 404

    monkeypatch.setattr(spec, "REPLAY_WAIT_S", 0.0)

    def sdk_replay() -> dict:
        with Client(api.url, api_key=api.keys["acme"]) as sdk:
            return dict(sdk.runs.replay(run))

    report = await asyncio.to_thread(sdk_replay)
    assert (report["status"], report["matches"]) == ("SUCCEEDED", 1)
