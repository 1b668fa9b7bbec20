"""GET /v1/runs?q=: the text is matched literally, in run names and the values a request
holds (a task, a plan's names and code), never in the request's own field names."""

from __future__ import annotations

from api_helpers import Api


def plan(name: str) -> dict[str, object]:
    return {"name": name, "steps": [{"id": "s", "tool": "bash", "code": "echo hi"}]}


async def test_search_text_is_literal(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        ids = {}
        for name in ("a_b", "a%b", "axb"):
            r = await c.post("/v1/runs", json={"plan": plan(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["run_id"]
        found = {}
        for q in ("_", "%", "a_b", "a%b", "\\", "axb"):
            r = await c.get("/v1/runs", params={"q": q})
            assert r.status_code == 200, r.text
            found[q] = {run["id"] for run in r.json()["runs"]}
    assert found["_"] == found["a_b"] == {ids["a_b"]}
    assert found["%"] == found["a%b"] == {ids["a%b"]}
    assert found["axb"] == {ids["axb"]} and found["\\"] == set()
