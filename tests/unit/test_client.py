"""The SDK's pure parts: `import onebox` stays light, errors map by code, SSE and NDJSON
parsing, exit codes of interpreter results."""

from __future__ import annotations

import json
import subprocess
import sys

import onebox
from onebox.client import errors, spec
from onebox.client.types import CellOutput, ExecResult
from onebox.errors import NotFound, PlanError


def test_import_onebox_loads_nothing_server_side() -> None:
    code = ("import sys\nfrom onebox import Client, AsyncClient, NotFound\n"
            "heavy = ('fastapi', 'psycopg', 'pydantic', 'onebox.store', 'onebox.api', "
            "'onebox.runtime', 'onebox.sandbox')\n"
            "print([m for m in sys.modules if m.startswith(heavy)])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
    assert set(onebox.__all__) <= set(dir(onebox))


def test_errors_map_by_code_keeping_the_servers_message() -> None:
    exc = errors.from_response(422, {"code": "invalid_plan", "field": "steps[a].depends_on",
                                     "message": "steps[a].depends_on: unknown step 'ghost'"},
                               "http://x/v1/runs")
    assert type(exc) is PlanError and exc.field == "steps[a].depends_on"
    assert exc.message == "steps[a].depends_on: unknown step 'ghost'"
    missing = errors.from_response(404, {"code": "not_found", "message": "m", "field": "run_id"},
                                   "u")
    assert isinstance(missing, NotFound) and missing.status == 404  # type: ignore[attr-defined]
    assert isinstance(errors.from_response(401, None, "u"), errors.Unauthorized)
    odd = errors.from_response(418, {"code": "teapot", "message": "short and stout"}, "u")
    assert type(odd) is errors.ApiError and odd.message == "short and stout"


def test_sse_blocks_comments_and_last_id() -> None:
    parser = spec.SseParser()
    lines = ["retry: 1000", "", ": keep-alive", "", "id: 7", "event: step_output",
             'data: {"seq": 7, "type": "step_output",', 'data: "payload": {"text": "hi"}}', ""]
    events = [e for e in (parser.feed(line) for line in lines) if e is not None]
    assert [(e.seq, e.type, e.payload) for e in events] == [(7, "step_output", {"text": "hi"})]
    assert parser.last_id == 7


def test_ndjson_lines_reach_the_callbacks_then_the_result() -> None:
    seen: list[tuple[str, object]] = []
    reader = spec.NdjsonReader(lambda t: seen.append(("out", t)), lambda t: seen.append(
        ("err", t)), lambda r: seen.append(("result", r)))
    for item in ({"type": "stdout", "text": "a"}, {"type": "stderr", "text": "b"},
                 {"type": "result", "data": {"text/plain": "42"}, "is_main_result": True},
                 {"type": "end", "result": {"stdout": "a", "stderr": "b", "ok": True}}):
        reader.feed(json.dumps(item))
    assert seen == [("out", "a"), ("err", "b"), ("result", CellOutput({"text/plain": "42"}, True))]
    assert reader.finish("u").exit_code == 0


def test_exit_codes_of_interpreter_results() -> None:
    def code(**data: object) -> int:
        return ExecResult.from_json(data).exit_code

    assert code(ok=True, error=None) == 0
    assert code(ok=False, error={"name": "KeyError", "value": "'x'", "traceback": ""}) == 1
    assert code(ok=False, error={"name": "SystemExit", "value": "3", "traceback": ""}) == 3
    assert code(ok=False, error={"name": "SystemExit", "value": "", "traceback": ""}) == 0
    assert code(ok=False, timed_out=True, exit_code=None) == 124
    assert code(ok=False, exit_code=5) == 5


def test_a_cut_event_does_not_advance_the_resume_point() -> None:
    parser = spec.SseParser()
    for line in ("id: 3", "event: a", 'data: {"seq": 3}', ""):
        parser.feed(line)
    parser.feed("id: 4")
    parser.feed("event: b")  # the connection drops here
    parser.reset()
    assert parser.last_id == 3
    assert parser.feed('data: {"seq": 5}') is None
    event = parser.feed("")
    assert event is not None and event.type == "message" and event.seq == 5
