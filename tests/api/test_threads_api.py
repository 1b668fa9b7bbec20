"""/v1/threads: a turn streamed over SSE, tenancy and bad input (real database, sandbox,
worker; scripted model)."""

from __future__ import annotations

import asyncio
import uuid

from api_helpers import Api, read_sse

INTENT = {"goal": "keep a note", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
SAVE = {"name": "save", "steps": [
    {"id": "save", "tool": "python", "code": "open('notes.txt', 'w').write('4417'); print('ok')"},
    {"id": "answer", "kind": "final", "depends_on": ["save"],
     "input": {"answer": "saved in notes.txt"}}]}


async def test_a_message_is_a_turn_whose_run_streams_over_sse(agent_api: Api) -> None:
    agent_api.model.add(INTENT, SAVE, {"facts": []}, {"summary": "A code is in notes.txt."})
    async with agent_api.client("acme") as a:
        thread = (await a.post("/v1/threads", json={"title": "notes"})).json()
        url = f"/v1/threads/{thread['id']}/messages"
        async with a.stream("POST", url, json={"message": "keep 4417 in a file"},
                            headers={"Accept": "text/event-stream"}) as r:
            assert r.status_code == 201, await r.aread()
            assert r.headers["content-type"].startswith("text/event-stream")
            events = await read_sse(r, until="run_succeeded")
        types = [e["event"] for e in events]
        assert types[0] == "run_submitted" and "thread_context" in types
        assert types.index("agent_finished") < types.index("thread_summary")  # upkeep, then end
        assert "step_succeeded" in types or "agent_finished" in types
        shown = (await a.get(f"/v1/threads/{thread['id']}")).json()
        (turn,) = shown["turns"]
        assert turn["status"] == "SUCCEEDED" and turn["answer"] == "saved in notes.txt"
        assert turn["context"]["total_tokens"] > 0
        listed = (await a.get("/v1/threads")).json()["threads"]
        assert [t["id"] for t in listed] == [thread["id"]] and listed[0]["turns"] == 1


async def test_another_tenant_gets_404_for_every_thread_route(api_no_worker: Api) -> None:
    async with api_no_worker.client("acme") as a, api_no_worker.client("globex") as g:
        tid = (await a.post("/v1/threads", json={})).json()["id"]
        assert (await g.get("/v1/threads")).json()["threads"] == []
        assert (await g.get(f"/v1/threads/{tid}")).status_code == 404
        r = await g.post(f"/v1/threads/{tid}/messages", json={"message": "hi"})
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        assert (await g.delete(f"/v1/threads/{tid}")).status_code == 404
        r = await g.post(f"/v1/threads/{tid}/fork", json={"turn": 1})
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        assert (await a.get(f"/v1/threads/{tid}")).status_code == 200
        assert (await a.delete(f"/v1/threads/{tid}")).status_code == 204
        assert (await a.get(f"/v1/threads/{tid}")).status_code == 404


async def test_bad_input_is_a_clear_4xx(api_no_worker: Api) -> None:
    async with api_no_worker.client("acme") as a:
        r = await a.post("/v1/threads", json={"profile": "nope"})
        assert r.status_code == 404 and "onebox profile list" in r.json()["message"]
        r = await a.post("/v1/threads", json={"colour": "red"})
        assert r.status_code == 422 and "colour" in r.text
        assert (await a.get("/v1/threads/t1")).status_code == 422
        tid = (await a.post("/v1/threads", json={})).json()["id"]
        r = await a.post(f"/v1/threads/{tid}/messages", json={"message": ""})
        assert r.status_code == 422 and "message" in r.text
        r = await a.post(f"/v1/threads/{uuid.uuid4()}/messages", json={"message": "hi"})
        assert r.status_code == 404


async def test_a_thread_forked_at_turn_1_over_http_asks_turn_1_again_in_a_new_thread(
        agent_api: Api) -> None:
    agent_api.model.add(INTENT, SAVE, {"facts": []}, {"summary": "A code is in notes.txt."})
    async with agent_api.client("acme") as a:
        thread = (await a.post("/v1/threads", json={"title": "notes"})).json()
        posted = (await a.post(f"/v1/threads/{thread['id']}/messages",
                               json={"message": "keep 4417 in a file"})).json()
        for _ in range(600):
            shown = (await a.get(f"/v1/threads/{thread['id']}")).json()
            if shown["turns"][0]["status"] == "SUCCEEDED":
                break
            await asyncio.sleep(0.05)
        agent_api.model.add(INTENT, SAVE, {"facts": []}, {"summary": "Again."})
        r = await a.post(f"/v1/threads/{thread['id']}/fork", json={"turn": 1})
        assert r.status_code == 201, r.text
        forked = r.json()
        assert forked["copied_turns"] == 0 and forked["turn"] == 1
        assert forked["run_id"] != posted["run_id"]
        assert forked["thread"]["forked_from"] == {"thread_id": thread["id"], "turn": 1}
        shown = (await a.get(f"/v1/threads/{forked['thread']['id']}")).json()
        assert shown["turns"][0]["message"] == "keep 4417 in a file"
        r = await a.post(f"/v1/threads/{thread['id']}/fork", json={"turn": 5})
        assert r.status_code == 422 and "has no turn 5" in r.json()["message"]
        r = await a.post(f"/v1/threads/{thread['id']}/fork", json={"turn": 0})
        assert r.status_code == 422 and "turn" in r.text
