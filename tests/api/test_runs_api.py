"""Runs over HTTP: submit (idempotent), list and filter, detail with steps, cancel, SSE resume."""

from __future__ import annotations

import asyncio

from api_helpers import Api, read_sse, wait_status

PLAN = {"name": "hello-api", "steps": [
    {"id": "write", "tool": "bash", "code": "echo hi > out.txt; echo wrote"},
    {"id": "read", "tool": "python", "code": "print(open('out.txt').read().upper())",
     "depends_on": ["write"]},
]}


async def test_submit_run_and_read_it_back(api: Api) -> None:
    async with api.client() as c:
        r = await c.post("/v1/runs", json={"plan": PLAN, "idempotency_key": "k1"})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        again = await c.post("/v1/runs", json={"plan": PLAN, "idempotency_key": "k1"})
        assert again.status_code == 200 and again.json() == {**r.json(), "existing": True}
        detail = await wait_status(c, run_id, "SUCCEEDED")
        steps = {s["step_id"]: s for s in detail["steps"]}
        assert steps["read"]["stdout"].strip() == "HI"
        assert steps["write"]["code"].startswith("echo hi")
        assert steps["write"]["resources"]["duration_ms"] > 0
        assert any(f["path"] == "out.txt" for f in steps["write"]["files"])
        assert [p["version"] for p in detail["plans"]] == [1]
        assert detail["plans"][0]["steps"][1]["depends_on"] == ["write"]
        assert detail["run"]["idempotency_key"] == "k1"
        snaps = (await c.get(f"/v1/runs/{run_id}/snapshots")).json()["snapshots"]
        assert str(steps["write"]["snapshot_id"]) in [s["id"] for s in snaps]
        tgz = await c.get(f"/v1/snapshots/{steps['write']['snapshot_id']}/download")
        assert tgz.status_code == 200 and tgz.content[:2] == b"\x1f\x8b"
        files = (await c.get(f"/v1/runs/{run_id}/files")).json()["files"]
        assert [f["path"] for f in files if f["type"] == "file"] == ["out.txt"] or files == []


async def test_same_idempotency_key_in_two_tenants_gives_two_runs(api_no_worker: Api) -> None:
    async with api_no_worker.client("acme") as a, api_no_worker.client("globex") as g:
        ra = await a.post("/v1/runs", json={"plan": PLAN}, headers={"Idempotency-Key": "same"})
        rg = await g.post("/v1/runs", json={"plan": PLAN}, headers={"Idempotency-Key": "same"})
        assert ra.status_code == rg.status_code == 201
        assert ra.json()["run_id"] != rg.json()["run_id"]


async def test_list_filters_by_status_time_and_text(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        first = (await c.post("/v1/runs", json={"plan": PLAN, "name": "alpha report"})).json()
        second = (await c.post("/v1/runs", json={"plan": PLAN, "name": "beta load"})).json()
        await c.post(f"/v1/runs/{second['run_id']}/cancel")
        runs = (await c.get("/v1/runs")).json()["runs"]
        assert [r["id"] for r in runs] == [second["run_id"], first["run_id"]]
        pending = (await c.get("/v1/runs", params={"status": "PENDING"})).json()["runs"]
        assert [r["id"] for r in pending] == [first["run_id"]]
        both = (await c.get("/v1/runs", params=[("status", "PENDING"), ("status", "CANCELLED")]))
        assert len(both.json()["runs"]) == 2
        text = (await c.get("/v1/runs", params={"q": "BETA"})).json()["runs"]
        assert [r["id"] for r in text] == [second["run_id"]]
        for literal in ("%", "a_r"):  # matched literally, not as wildcards ("a r" in alpha report)
            assert (await c.get("/v1/runs", params={"q": literal})).json()["runs"] == []
        created = runs[0]["created_at"]
        later = (await c.get("/v1/runs", params={"since": created})).json()["runs"]
        assert [r["id"] for r in later] == [second["run_id"]]
        bad = await c.get("/v1/runs", params={"status": "NOPE"})
        assert bad.status_code == 422 and bad.json()["field"] == "status.0"


async def test_cancel_then_cancel_again_is_a_conflict(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        assert (await c.post(f"/v1/runs/{run_id}/cancel")).status_code == 200
        again = await c.post(f"/v1/runs/{run_id}/cancel")
        assert again.status_code == 409
        assert again.json()["code"] == "conflict" and "CANCELLED" in again.json()["message"]


async def test_bad_plan_names_the_step_and_field(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        r = await c.post("/v1/runs", json={"plan": {"steps": [
            {"id": "a", "tool": "bash", "code": "true", "depends_on": ["ghost"]}]}})
        assert r.status_code == 422
        body = r.json()
        assert body["code"] == "invalid_plan" and "ghost" in body["message"]
        assert set(body) == {"code", "message", "field"}
        yaml_text = "steps:\n  - id: a\n    tool: bash\n    code: 'true'\n"
        text = await c.post("/v1/runs", json={"plan": yaml_text})
        assert text.status_code == 422 and text.json()["field"] == "plan", text.text
        assert "/v1/plans/parse" in text.json()["message"], text.text
        parsed = await c.post("/v1/plans/parse", json={"text": yaml_text})  # the way it points
        again = await c.post("/v1/runs", json={"plan": parsed.json()["plan"]})
        assert again.status_code == 201, again.text


async def test_task_without_a_model_is_refused_with_the_settings_to_set(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        r = await c.post("/v1/runs", json={"task": "count the lines of README"})
        assert r.status_code == 503
        msg = r.json()["message"]
        assert "ONEBOX_LLM__MODEL" in msg and "OPENAI_BASE_URL" in msg and "OPENAI_API_KEY" in msg


async def test_sse_streams_live_and_resumes_from_last_event_id(api: Api) -> None:
    async with api.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        url = f"/v1/runs/{run_id}/events/stream"
        async with c.stream("GET", url) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            first = await asyncio.wait_for(read_sse(r, until="step_succeeded"), 60)
        assert [e["event"] for e in first][:3] == ["run_submitted", "plan_created", "step_queued"]
        await wait_status(c, run_id, "SUCCEEDED")
        resume_from = first[-1]["id"]
        async with c.stream("GET", url, headers={"Last-Event-ID": str(resume_from)}) as r:
            rest = await asyncio.wait_for(read_sse(r, until="run_succeeded"), 60)
        all_events = (await c.get(f"/v1/runs/{run_id}/events")).json()["events"]
        seqs = [e["seq"] for e in all_events]
        got = [e["id"] for e in first] + [e["id"] for e in rest]
        assert got == seqs[: len(got)], "events missing, duplicated or out of order"
        assert rest[-1]["event"] == "run_succeeded"
        assert all(e["data"]["run_id"] == run_id for e in rest)
        for _ in range(100):  # a closed stream unsubscribes: nothing leaks per connection
            if "onebox_sse_subscribers 0\n" in (await c.get("/metrics")).text:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("SSE subscribers leaked after the clients disconnected")
