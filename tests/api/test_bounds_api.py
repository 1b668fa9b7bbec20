"""Hostile requests get a 4xx naming the field or the bound, never a 500 or a long stall."""

from __future__ import annotations

from api_helpers import Api


def _deep(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _chain(n: int) -> list[dict[str, object]]:
    return [{"id": f"s{i}", "tool": "bash", "code": "true",
             "depends_on": [f"s{i - 1}"] if i else []} for i in range(n)]


def _assert_error(response: object, status_range: range, *words: str) -> dict[str, object]:
    assert response.status_code in status_range, response.text  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"code", "message", "field"}, body
    assert "Traceback" not in body["message"]
    for word in words:
        assert word in body["message"] or word == body["field"], (word, body)
    return body


async def test_json_nested_500_deep_is_a_422_naming_the_depth(api_no_worker: Api) -> None:
    plan = {"steps": [{"id": "a", "tool": "bash", "code": "true", "input": {"deep": _deep(500)}}]}
    async with api_no_worker.client() as c:
        response = await c.post("/v1/runs", json={"plan": plan})
        body = _assert_error(response, range(400, 500), "deep")
        assert "64" in body["message"], body
        memory = await c.post("/v1/memory", json={"scope": "s", "content": "x",
                                                  "metadata": {"m": _deep(500)}})
        _assert_error(memory, range(400, 500), "deep")


async def test_json_nested_deeper_than_the_parser_is_a_4xx(api_no_worker: Api) -> None:
    raw = b'{"plan": {"steps": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    async with api_no_worker.client() as c:
        response = await c.post("/v1/runs", content=raw,
                                headers={"content-type": "application/json"})
        _assert_error(response, range(400, 500), "deep")


async def test_plan_limits_above_the_operator_caps_are_refused(api_no_worker: Api) -> None:
    cases = {"memory_mb": 4_000_000, "pids": 4_000_000, "cpus": 64, "disk_mb": 10_000_000}
    async with api_no_worker.client() as c:
        for name, value in cases.items():
            plan = {"steps": [{"id": "a", "tool": "bash", "code": "true",
                               "limits": {name: value}}]}
            response = await c.post("/v1/runs", json={"plan": plan})
            body = _assert_error(response, range(400, 500), "operator cap",
                                 f"ONEBOX_SANDBOX__MAX_{name.upper()}")
            assert body["field"].endswith(f"limits.{name}"), body
        runs = (await c.get("/v1/runs")).json()["runs"]
        assert runs == [], "a refused plan leaves no run behind"


async def test_session_execute_above_the_memory_cap_is_refused(api_no_worker: Api) -> None:
    api_no_worker.settings.sandbox.max_memory_mb = 1024
    async with api_no_worker.client() as c:
        sid = (await c.post("/v1/sessions")).json()["id"]
        response = await c.post(f"/v1/sessions/{sid}/execute",
                                json={"code": "print(1)", "memory_mb": 4096})
        body = _assert_error(response, range(400, 500), "operator cap")
        assert body["field"] == "limits.memory_mb", body


async def test_a_10000_step_chain_is_accepted(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        response = await c.post("/v1/runs", json={"plan": {"steps": _chain(10_000)}})
        assert response.status_code == 201, response.text
        run_id = response.json()["run_id"]
        detail = (await c.get(f"/v1/runs/{run_id}")).json()
        steps = detail["plans"][0]["steps"]
        assert [s["id"] for s in steps[:3]] == ["s0", "s1", "s2"] and len(steps) == 10_000
        assert [s["step_id"] for s in detail["steps"]] == ["s0"], "only the head is ready"


async def test_a_cyclic_10000_step_plan_is_a_422_naming_the_cycle(api_no_worker: Api) -> None:
    steps = _chain(10_000)
    steps[0] = {**steps[0], "depends_on": ["s9999"]}
    async with api_no_worker.client() as c:
        response = await c.post("/v1/runs", json={"plan": {"steps": steps}})
        body = _assert_error(response, range(422, 423), "cycle")
        assert len(body["message"]) < 2000, "the message stays readable"
