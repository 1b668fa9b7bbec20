"""GET /v1/runs/{id} and /steps page through a big run: a summary from SQL counts, a page
of attempts, and a `next` cursor that walks every attempt once."""

from __future__ import annotations

from api_helpers import Api

N_STEPS = 10_000
FAN = {"steps": [{"id": f"w{i}", "tool": "bash", "code": "true"} for i in range(N_STEPS)]}


async def test_the_run_api_pages_through_a_big_run(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        r = await c.post("/v1/runs", json={"plan": FAN})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        detail = (await c.get(f"/v1/runs/{run_id}")).json()
        assert detail["summary"]["steps"] == {"PENDING": N_STEPS}
        assert len(detail["steps"]) == 100 and detail["next"] == "100.1"
        seen, after = [], None
        while True:
            params = {"limit": 1000, **({"after": after} if after else {})}
            page = (await c.get(f"/v1/runs/{run_id}/steps", params=params)).json()
            seen += [s["execution_id"] for s in page["steps"]]
            if (after := page["next"]) is None:
                break
        assert len(seen) == len(set(seen)) == N_STEPS


async def test_a_bad_page_request_is_a_422_naming_the_field(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": {"steps": FAN["steps"][:2]}})).json()[
            "run_id"]
        for params in ({"after": "1;drop"}, {"limit": 0}, {"limit": 1001}):
            r = await c.get(f"/v1/runs/{run_id}", params=params)
            assert r.status_code == 422, (params, r.text)
            assert next(iter(params)) in r.text
