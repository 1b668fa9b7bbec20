"""A thread turn's upkeep runs on the worker serving the model, not in the API process: an
API with NO chat model takes two turns while a worker with the scripted model runs them
(real database, sandbox, embeddings)."""

from __future__ import annotations

import asyncio

from api_helpers import Api, wait_status

from onebox.runtime.engine.worker import Worker
from onebox.testing import ScriptedModel

INTENT = {"goal": "keep a note", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
SAVE = {"name": "save", "steps": [
    {"id": "save", "tool": "python", "code": "open('notes.txt', 'w').write('4417'); print('ok')"},
    {"id": "answer", "kind": "final", "depends_on": ["save"],
     "input": {"answer": "saved in notes.txt"}}]}
ANSWER = {"name": "answer", "steps": [
    {"id": "answer", "kind": "final", "input": {"answer": "your code is 4417"}}]}
FACT = "The user's launch code is 4417; it is kept in notes.txt."


async def test_an_api_without_a_model_takes_turns_whose_upkeep_the_worker_runs(
        kapi: Api) -> None:
    assert not kapi.settings.llm.model  # the API process has no chat model at all
    settings = kapi.settings.model_copy(deep=True)
    settings.llm.model = "scripted"
    model = ScriptedModel([INTENT, SAVE, {"facts": [FACT]}, {"summary": "A code is kept."},
                           INTENT, ANSWER, {"facts": []}, {"summary": "The code was asked."}])
    stop = asyncio.Event()
    worker = Worker(kapi.rt.db, kapi.rt.backend, settings, objects=kapi.rt.objects, model=model)
    serving = asyncio.create_task(worker.serve(stop, drain_s=2))
    try:
        async with kapi.client("acme") as a:
            tid = (await a.post("/v1/threads", json={})).json()["id"]
            runs = []
            for message in ("keep my launch code 4417 in a file", "what is my launch code?"):
                r = await a.post(f"/v1/threads/{tid}/messages", json={"message": message})
                assert r.status_code == 201, r.text
                runs.append(r.json()["run_id"])
                detail = await wait_status(a, runs[-1], "SUCCEEDED", "FAILED", "DEAD")
                assert detail["run"]["status"] == "SUCCEEDED", detail["run"]["error"]
            shown = (await a.get(f"/v1/threads/{tid}")).json()
    finally:
        stop.set()
        await serving
    assert model.remaining == 0  # every call, upkeep included, went to the worker's model
    turn1, turn2 = shown["turns"]
    assert turn1["answer"] == "saved in notes.txt" and turn1["upkept_at"] is not None
    assert [f["content"] for f in turn1["facts"]] == [FACT]
    assert turn2["context"]["parts"]["memories"]["sources"] == [turn1["facts"][0]["id"]]
    assert turn2["context"]["summary_version"] == 1
    assert "4417" in (model.requests[4].messages[-1].content or "")  # turn 2's intent prompt
    assert shown["thread"]["summary"] == "The code was asked."
