"""Live logs (issue 14 point 4): a running step's output arrives as step_output events while
it runs, in order, contiguous per stream, capped, and before the step's own event."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.engine import event_log
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import ExecRequest, SandboxBackend
from onebox.store.db import Database

TICKER = "for i in $(seq 1 20); do echo \"line $i é\"; echo \"err $i\" >&2; sleep 0.1; done"



async def _events(db: Database, run_id: uuid.UUID) -> list[dict[str, Any]]:
    return await event_log.run_events_between(db, run_id, 0, 2**62, 100_000)


async def _run(db: Database, backend: SandboxBackend, settings: Settings,
               code: str) -> tuple[uuid.UUID, bool]:
    """Run a one-step plan; True when a step_output event was seen while the step ran."""
    plan = parse_plan({"name": "live", "steps": [{"id": "tick", "tool": "bash", "code": code}]})
    submitted = await submit_plan(db, settings, plan)
    worker = Worker(db, backend, settings, run_id=submitted.run_id)
    serving = asyncio.create_task(worker.serve(asyncio.Event()))
    seen_live = False
    while not serving.done():
        steps = await runs_api.run_steps(db, submitted.run_id)
        kinds = {e["type"] for e in await _events(db, submitted.run_id)}
        if steps[0]["status"] == "RUNNING" and "step_output" in kinds:
            seen_live = True
        await asyncio.sleep(0.05)
    await serving
    return submitted.run_id, seen_live


def _by_stream(events: list[dict[str, Any]], stream: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in events
            if e["type"] == "step_output" and e["payload"]["stream"] == stream]


async def test_output_streams_while_the_step_runs_in_order_and_contiguous(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, seen_live = await _run(db, backend, settings, TICKER)
    events = await _events(db, run_id)
    assert seen_live, "no step_output event was visible while the step was running"
    step = (await runs_api.run_steps(db, run_id))[0]
    assert step["status"] == "SUCCESS"
    done_seq = next(e["seq"] for e in events if e["type"] == "step_succeeded")
    outputs = [e for e in events if e["type"] == "step_output"]
    assert len(outputs) >= 2 and all(e["seq"] < done_seq for e in outputs)
    for stream, archived in (("stdout", step["stdout"]), ("stderr", step["stderr"])):
        chunks = _by_stream(events, stream)
        offsets = [c["offset"] for c in chunks]
        assert offsets == [sum(c["bytes"] for c in chunks[:i]) for i in range(len(chunks))]
        assert "".join(c["text"] for c in chunks) == archived
        assert all(c["step_id"] == "tick" and c["execution_id"] == str(step["id"])
                   for c in chunks)
    assert not any(e["type"] == "step_output_truncated" for e in events)


async def test_streamed_output_is_capped_with_one_truncation_event(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    settings.runtime.live_log_max_bytes = 1000
    code = "python3 -c \"import sys; [sys.stdout.write('é' * 99 + '\\n') for _ in range(100)]\""
    run_id, _ = await _run(db, backend, settings, code)
    events = await _events(db, run_id)
    step = (await runs_api.run_steps(db, run_id))[0]
    assert step["status"] == "SUCCESS"
    assert step["stdout"] == ("é" * 99 + "\n") * 100, "the archived output must stay complete"
    chunks = _by_stream(events, "stdout")
    streamed = sum(c["bytes"] for c in chunks)
    assert 997 <= streamed <= 1000, "the cap ends on a whole character"
    assert "".join(c["text"] for c in chunks).encode() == step["stdout"].encode()[:streamed]
    truncated = [e["payload"] for e in events if e["type"] == "step_output_truncated"]
    assert len(truncated) == 1 and truncated[0]["streamed_bytes"] == streamed
    last_output = max(e["seq"] for e in events if e["type"] == "step_output")
    assert next(e["seq"] for e in events if e["type"] == "step_output_truncated") > last_output


@pytest.mark.parametrize("kind", ["linux", "process"])
async def test_each_backend_hands_every_chunk_to_the_output_callback(
        settings: Settings, kind: str) -> None:
    from onebox.sandbox.registry import get_backend

    settings.sandbox.backend = kind  # type: ignore[assignment]
    backend = get_backend(settings)
    chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    request = ExecRequest(session_id=f"live-{kind}", language="bash", code=TICKER,
                          on_output=lambda stream, chunk: chunks[stream].append(chunk))
    try:
        result = await backend.execute(request)
    finally:
        await backend.cleanup(request.session_id)
        await backend.close()
    assert result.ok, result.stderr
    assert b"".join(chunks["stdout"]) == result.stdout_raw
    assert b"".join(chunks["stderr"]) == result.stderr_raw
    assert len(chunks["stdout"]) > 1, "the output came in one piece, not as it was printed"
