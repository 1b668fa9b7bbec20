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


async def test_a_step_view_serves_the_exact_bytes_where_the_text_is_not_them(api: Api) -> None:
    import base64

    from api_helpers import wait_status

    plan = {"steps": [
        {"id": "binary", "tool": "bash", "code": "printf 'a\\0b\\377c'"},
        {"id": "text", "tool": "bash", "code": "printf 'plain'"}]}
    async with api.client() as c:
        run = (await c.post("/v1/runs", json={"plan": plan})).json()
        detail = await wait_status(c, run["run_id"], "SUCCEEDED", "FAILED", "DEAD")
    steps = {s["step_id"]: s for s in detail["steps"]}
    assert base64.b64decode(steps["binary"]["stdout_base64"]) == b"a\0b\xffc"
    assert "\0" not in steps["binary"]["stdout"]
    assert steps["text"]["stdout"] == "plain" and steps["text"]["stdout_base64"] is None
