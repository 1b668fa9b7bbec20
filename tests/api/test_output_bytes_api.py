"""The API refuses absurd cpus with a 4xx naming the field, and serves a step's raw output."""

from __future__ import annotations

import pytest
from api_helpers import Api

BODY = ('{"plan": {"steps": [{"id": "s", "tool": "bash", "code": "true",'
        ' "limits": {"cpus": %s}}]}}')


@pytest.mark.parametrize("value", ["1e300", "Infinity", "-Infinity", "NaN", '"nan"'])
async def test_absurd_cpus_are_a_4xx_naming_the_field(api_no_worker: Api, value: str) -> None:
    async with api_no_worker.client() as c:
        response = await c.post("/v1/runs", content=(BODY % value).encode(),
                                headers={"content-type": "application/json"})
        assert response.status_code in (400, 403, 422), (value, response.text)
        body = response.json()
        assert set(body) == {"code", "message", "field"}, body
        assert "cpus" in (body["field"] or ""), body
        runs = await c.get("/v1/runs")
        assert runs.status_code == 200 and runs.json()["runs"] == [], "nothing half-stored"
