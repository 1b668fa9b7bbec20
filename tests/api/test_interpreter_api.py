"""POST /v1/sessions/{id}/execute for python: the stateful interpreter's JSON shape, the
one-shot ``stateless`` run, and NDJSON streaming with ``Accept: application/x-ndjson``."""

from __future__ import annotations

import json

from api_helpers import Api

NDJSON = {"Accept": "application/x-ndjson"}


async def test_python_keeps_state_and_returns_the_interpreter_shape(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        sid = (await c.post("/v1/sessions")).json()["id"]
        first = await c.post(f"/v1/sessions/{sid}/execute", json={"code": "x = 41"})
        assert first.status_code == 200, first.text
        second = (await c.post(f"/v1/sessions/{sid}/execute", json={"code": "x + 1"})).json()
        assert set(second) >= {"stdout", "stderr", "results", "error", "execution_count",
                               "duration_ms", "timed_out", "state_lost", "restart_reason",
                               "memory_peak_mb", "ok"}
        assert second["results"] == [{"data": {"text/plain": "42"}, "is_main_result": True}]
        assert second["execution_count"] == 2 and second["ok"] and second["error"] is None
        failed = (await c.post(f"/v1/sessions/{sid}/execute", json={"code": "1/0"})).json()
        assert not failed["ok"] and failed["error"]["name"] == "ZeroDivisionError"
        assert "Traceback" in failed["error"]["traceback"]
        one_shot = (await c.post(f"/v1/sessions/{sid}/execute",
                                 json={"code": "print(x)", "stateless": True})).json()
        assert one_shot["exit_code"] == 1 and "NameError" in one_shot["stderr"]
        bad = await c.post(f"/v1/sessions/{sid}/execute", json={"code": "1", "stdin": "a"})
        assert bad.status_code == 422 and bad.json()["field"] == "stdin"


async def test_ndjson_streams_output_and_results_then_the_end(api_no_worker: Api) -> None:
    async with api_no_worker.client() as c:
        sid = (await c.post("/v1/sessions")).json()["id"]
        code = "print('a')\ndisplay('shown')\nimport sys; print('e', file=sys.stderr)\n7"
        async with c.stream("POST", f"/v1/sessions/{sid}/execute", json={"code": code},
                            headers=NDJSON) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/x-ndjson")
            lines = [json.loads(line) async for line in response.aiter_lines() if line]
        kinds = [e["type"] for e in lines]
        text = "".join(e["text"] for e in lines if e["type"] == "stdout")
        assert text == "a\n" and kinds[-1] == "end"
        assert kinds.index("stdout") < kinds.index("result") < kinds.index("stderr")
        results = [e for e in lines if e["type"] == "result"]
        assert results[0] == {"type": "result", "data": {"text/plain": "'shown'"},
                              "is_main_result": False}
        assert results[1]["data"] == {"text/plain": "7"} and results[1]["is_main_result"]
        end = lines[-1]["result"]
        assert end["ok"] and end["stdout"] == "a\n" and end["stderr"] == "e\n"
