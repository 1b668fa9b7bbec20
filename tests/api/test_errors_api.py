"""Bad input gets a 4xx {code, message, field}; size limits; metrics and health endpoints."""

from __future__ import annotations

import httpx
from api_helpers import Api

from onebox.api import create_app


async def test_bad_requests_name_the_problem(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        cases = [
            (await c.post("/v1/runs", content=b"{not json", headers={
                "content-type": "application/json"}), 422, None),
            (await c.post("/v1/runs", json={"plan": {"steps": []}, "task": "both"}), 422, None),
            (await c.post("/v1/runs", json={"plan": {"name": "a\u0000b", "steps": [
                {"id": "a", "tool": "bash", "code": "true"}]}}), 422, "plan"),
            (await c.post("/v1/runs", json={"plan": {"steps": []}, "surprise": 1}), 422,
             "surprise"),
            (await c.get("/v1/runs/not-a-uuid"), 422, "run_id"),
            (await c.get("/v1/runs", params={"limit": 0}), 422, "limit"),
            (await c.get("/v1/runs/00000000-0000-0000-0000-000000000000"), 404, "run_id"),
            (await c.get("/v1/nothing-here"), 404, None),
            (await c.put("/v1/runs"), 405, None),
            (await c.post("/v1/sessions/api-0000000000000000/execute", json={"code": ""}), 422,
             "code"),
            (await c.post("/v1/memory", json={"scope": "s", "content": "x\u0000"}), 422, "content"),
            (await c.get("/v1/runs/00000000-0000-0000-0000-000000000000/events/stream",
                         headers={"Last-Event-ID": "x"}), 404, "run_id"),
        ]
        for response, status, field in cases:
            body = response.json()
            assert response.status_code == status, (status, response.text)
            assert set(body) == {"code", "message", "field"}, body
            assert body["message"] and "Traceback" not in body["message"]
            if field is not None:
                assert body["field"] == field, body


async def test_request_size_limits(api_no_worker: Api) -> None:
    limit = api_no_worker.settings.api.max_request_bytes
    async with api_no_worker.client() as c:
        big = await c.post("/v1/runs", content=b"x" * (limit + 1),
                           headers={"content-type": "application/json"})
        assert big.status_code == 413 and big.json()["code"] == "request_too_large"

        async def chunks():  # no Content-Length: counted while streaming
            for _ in range(limit // 65536 + 2):
                yield b" " * 65536

        streamed = await c.post("/v1/runs", content=chunks(),
                                headers={"content-type": "application/json"})
        assert streamed.status_code == 413
        sid = (await c.post("/v1/sessions")).json()["id"]
        ok = await c.post(f"/v1/sessions/{sid}/files", files={"file": ("f.bin", b"y" * (limit + 10))})
        assert ok.status_code == 201, "uploads have their own, larger limit"


async def test_unexpected_errors_are_500_without_details(api_no_worker: Api) -> None:
    app = create_app(api_no_worker.settings, runtime=api_no_worker.rt)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals /etc/shadow")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.get("/boom")
    assert r.status_code == 500
    assert r.json()["code"] == "internal_error"
    assert "secret" not in r.text and "Traceback" not in r.text


async def test_metrics_health_and_openapi(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        await c.post("/v1/runs", json={"plan": {"steps": [
            {"id": "a", "tool": "bash", "code": "true"}]}})
        text = (await c.get("/metrics")).text
        lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
        assert lines["onebox_queue_depth"] == "1"
        assert lines['onebox_runs{status="PENDING",tenant="acme"}'] == "1"
        for name in ("onebox_live_sessions", 'onebox_blocked_network_attempts_total{tenant="acme"}'):
            assert name in lines
        assert "# TYPE onebox_step_duration_ms histogram" in text
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        ready = await c.get("/readyz")
        assert ready.json()["checks"]["database"] == "ok"
        spec = (await c.get("/openapi.json")).json()
        assert "/v1/runs/{run_id}/events/stream" in spec["paths"]
        tools = (await c.get("/v1/tools")).json()["tools"]
        assert "python" in [t["name"] for t in tools]
        ranked = (await c.get("/v1/tools/rank", params={"format": "CSV", "max_cost": "LOW"})).json()
        assert "python" in [t["name"] for t in ranked["tools"]]
        assert all(t["cost_class"] in ("FREE", "LOW") for t in ranked["tools"])
        console = await c.get("/ui/")
        assert console.status_code == 200 and "app.js" in console.text
        assert "default-src 'self'" in console.headers["content-security-policy"]
        assert console.headers["x-content-type-options"] == "nosniff"
