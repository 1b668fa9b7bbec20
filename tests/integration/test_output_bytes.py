"""A step's output is bytes: stored exactly whatever they are, hashed as bytes, shown as text.

An archive that fails is recorded as that failure with its reason, never as a lost worker;
an error of the sandbox backend is a FAILED attempt; absurd cpus are refused at submission.
"""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Iterator
from typing import Any

import pytest

from onebox.agent.plan import Plan, parse_plan
from onebox.config import Settings
from onebox.errors import OneboxError
from onebox.runtime.engine.archive import output_bytes, output_hash_of
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.service import Runtime
from onebox.store import runs as store
from onebox.store.db import Database

LOST = "lease expired"


@pytest.fixture
async def rt(db: Database, settings: Settings) -> Runtime:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    backend = get_backend(settings)
    yield Runtime(settings, db, backend)
    await backend.close()


def plan_of(*steps: dict[str, Any]) -> Plan:
    return parse_plan({"steps": list(steps)})


def printing(data: bytes, stream: str = "stdout") -> str:
    """Python that writes exactly ``data`` to ``stream``."""
    return (f"import base64, sys; sys.{stream}.buffer.write("
            f"base64.b64decode({base64.b64encode(data).decode()!r})); sys.{stream}.flush()")


async def one_step(rt: Runtime, **step: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    final = await rt.run_plan(plan_of({"id": "s", **step}))
    return final, await runs_api.run_steps(rt.db, final["id"])


def assert_not_lost(final: dict[str, Any], steps: list[dict[str, Any]]) -> None:
    assert LOST not in (final["error"] or "")
    assert all(LOST not in (s["error"] or "") for s in steps), [s["error"] for s in steps]


async def test_a_nul_byte_is_stored_exactly_and_shown_as_replacement(rt: Runtime) -> None:
    final, steps = await one_step(rt, tool="bash", code="printf 'a\\0b'; printf 'e\\0rr' >&2")
    assert final["status"] == "SUCCEEDED", final["error"]
    assert_not_lost(final, steps)
    (step,) = steps
    assert step["attempt"] == 1
    assert output_bytes(step, "stdout") == b"a\0b"
    assert output_bytes(step, "stderr") == b"e\0rr"
    assert step["stdout"] == "a\ufffdb" and step["stderr"] == "e\ufffdrr"
    assert step["output_hash"] == output_hash_of(0, b"a\0b", b"e\0rr")
    assert step["output_hash"] != output_hash_of(0, "a\ufffdb".encode(), "e\ufffdrr".encode())


async def test_4_kb_of_random_bytes_survive_exactly_with_their_hash(rt: Runtime) -> None:
    data = os.urandom(4096)
    final, steps = await one_step(rt, tool="python", code=printing(data))
    assert final["status"] == "SUCCEEDED", final["error"]
    (step,) = steps
    assert output_bytes(step, "stdout") == data
    assert step["output_hash"] == output_hash_of(0, data, b"")
    assert "\0" not in step["stdout"]


async def test_urandom_from_the_shell_is_archived_in_one_attempt(rt: Runtime) -> None:
    final, steps = await one_step(rt, tool="bash", code="head -c 4096 /dev/urandom")
    assert final["status"] == "SUCCEEDED", final["error"]
    (step,) = steps
    raw = output_bytes(step, "stdout")
    assert len(raw) == 4096
    assert step["output_hash"] == output_hash_of(0, raw, b"")


async def test_invalid_utf8_is_kept_as_bytes_with_a_text_view(rt: Runtime) -> None:
    data = b"ok \xff\xfe \xc3( end\n"
    final, steps = await one_step(rt, tool="python", code=printing(data, "stderr"))
    assert final["status"] == "SUCCEEDED", final["error"]
    (step,) = steps
    assert output_bytes(step, "stderr") == data
    assert step["stderr"] == data.decode("utf-8", "replace")
    assert step["stdout_bytes"] is None, "clean UTF-8 output is its text column"
    assert step["output_hash"] == output_hash_of(0, b"", data)


async def test_a_nul_in_a_failing_step_is_kept_too(rt: Runtime) -> None:
    final, steps = await one_step(rt, tool="bash", code="printf 'x\\0y'; exit 4",
                                  max_attempts=1)
    assert final["status"] == "DEAD"
    assert_not_lost(final, steps)
    (step,) = steps
    assert step["status"] == "FAILED" and step["exit_code"] == 4
    assert output_bytes(step, "stdout") == b"x\0y"


class _FailOnce(dict[str, str]):
    """The named queries, with ``finish_step`` replaced by one the database refuses, once."""

    def __init__(self, queries: dict[str, str]) -> None:
        super().__init__(queries)
        self.failures = 0

    def __getitem__(self, name: str) -> str:
        if name == "finish_step" and self.failures == 0:
            self.failures += 1
            return "SELECT 1 / 0 AS id, %(id)s, %(fencing_token)s"
        return super().__getitem__(name)


@pytest.fixture
def failing_finish(monkeypatch: pytest.MonkeyPatch) -> Iterator[_FailOnce]:
    queries = _FailOnce(store.Q)
    monkeypatch.setattr(store, "Q", queries)
    yield queries


async def test_an_archive_failure_is_recorded_with_its_reason(
        rt: Runtime, failing_finish: _FailOnce) -> None:
    final, steps = await one_step(rt, tool="bash", code="echo fine")
    assert failing_finish.failures == 1, "the probe must reach the finish query"
    assert final["status"] == "SUCCEEDED", final["error"]
    assert_not_lost(final, steps)
    first, second = steps
    assert first["status"] == "FAILED"
    assert first["error"].startswith("could not archive: ")
    assert "division by zero" in first["error"]
    assert second["status"] == "SUCCESS" and second["stdout"] == "fine\n"
    events = await runs_api.run_events(rt.db, final["id"])
    failed = [e for e in events if e["type"] == "step_failed"]
    assert failed and failed[0]["payload"]["error"] == first["error"]


async def test_an_archive_failure_of_the_last_attempt_fails_the_run_with_the_reason(
        rt: Runtime, failing_finish: _FailOnce) -> None:
    final, steps = await one_step(rt, tool="bash", code="echo fine", max_attempts=1)
    assert final["status"] == "DEAD"
    assert "could not archive" in final["error"]
    assert_not_lost(final, steps)


async def test_an_os_error_of_the_sandbox_is_a_failed_attempt(
        rt: Runtime, settings: Settings) -> None:
    """An operator cap as absurd as the request lets 1e300 cpus reach the kernel (cgroup or
    affinity writes fail with OSError): the attempt fails with the reason, nothing expires."""
    settings.sandbox.max_cpus = 1e300
    final, steps = await one_step(rt, tool="bash", code="echo hi", max_attempts=1,
                                  limits={"cpus": 1e300})
    assert final["status"] == "DEAD"
    assert_not_lost(final, steps)
    (step,) = steps
    assert step["status"] == "FAILED"
    assert "sandbox" in step["error"] and "Error" in step["error"], step["error"]


@pytest.mark.parametrize("cpus", [1e300, math.inf, -math.inf, math.nan, "1e300", "nan"])
async def test_absurd_cpus_are_refused_at_submission(rt: Runtime, cpus: Any) -> None:
    spec = {"steps": [{"id": "s", "tool": "bash", "code": "true", "limits": {"cpus": cpus}}]}
    with pytest.raises(OneboxError) as refused:
        await rt.submit(parse_plan(spec))
    assert refused.value.http_status // 100 == 4
    assert "cpus" in (refused.value.field or "") + refused.value.message
    assert await rt.db.fetchone("SELECT count(*) AS n FROM onebox.runs") == {"n": 0}


AGENT_INTENT = {"goal": "print bytes", "entities": [], "capabilities": ["python"],
                "formats": [], "risks": [], "fallbacks": []}
AGENT_PLAN = {"name": "bytes", "steps": [
    {"id": "raw", "tool": "python", "code":
        "import json, os, sys\nsys.stdout.buffer.write(b'a\\x00b\\xff'); sys.stdout.flush()\n"
        "json.dump({'k\\u0000': 'v\\u0000'}, open(os.environ['ONEBOX_RESULT'], 'w'))"},
    {"id": "answer", "kind": "final", "depends_on": ["raw"], "input": {"answer": "done"}},
]}


async def test_the_agent_path_keeps_the_bytes_and_stores_its_observation(
        db: Database, settings: Settings) -> None:
    import asyncio

    from onebox.objects.registry import get_object_store
    from onebox.runtime.agent.runs import submit_task
    from onebox.runtime.engine.worker import Worker
    from onebox.sandbox.registry import get_backend
    from onebox.testing import ScriptedModel

    settings.runtime.poll_s = 0.1
    backend = get_backend(settings)
    try:
        run_id, _ = await submit_task(db, "print some bytes")
        worker = Worker(db, backend, settings, run_id=run_id,
                        model=ScriptedModel([AGENT_INTENT, AGENT_PLAN]),
                        objects=get_object_store(settings))
        await asyncio.wait_for(worker.serve(asyncio.Event()), 90)
    finally:
        await backend.close()
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    (raw,) = [s for s in await runs_api.run_steps(db, run_id) if s["step_id"] == "raw"]
    assert raw["status"] == "SUCCESS" and raw["attempt"] == 1
    assert output_bytes(raw, "stdout") == b"a\0b\xff"
    assert raw["stdout"] == "a\ufffdb\ufffd"
    observed = [e["payload"] for e in await runs_api.run_events(db, run_id)
                if e["type"] == "agent_observation" and "k\ufffd" in str(e["payload"])]
    assert observed, "the declared result is stored with NUL shown as U+FFFD"
