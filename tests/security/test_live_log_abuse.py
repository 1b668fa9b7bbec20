"""Live logs under hostile output: NUL and invalid UTF-8 cannot break the event insert
(jsonb refuses \\u0000), and a flood cannot fill the event log (the per-step cap holds and
events stay few); the archived output keeps the exact bytes."""

from __future__ import annotations

import asyncio

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.engine import event_log
from onebox.runtime.engine.live_logs import EVENT_BYTES
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

HOSTILE = ("import sys\nout = sys.stdout.buffer\nout.write(b'a\\x00b\\xff\\xfe c\\xe2\\x82\\n')\n"
           "out.flush()\nfor _ in range(400):\n    out.write(b'\\x00' * 65536)\n")
CAP_BYTES = 256 * 1024



async def test_nul_invalid_utf8_and_a_25_mb_flood_stay_safe_and_capped(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    settings.runtime.live_log_max_bytes = CAP_BYTES
    plan = parse_plan({"name": "hostile", "steps": [
        {"id": "flood", "tool": "python", "code": HOSTILE}]})
    submitted = await submit_plan(db, settings, plan)
    await asyncio.wait_for(Worker(db, backend, settings, run_id=submitted.run_id)
                           .serve(asyncio.Event()), 120)
    step = (await runs_api.run_steps(db, submitted.run_id))[0]
    assert step["status"] == "SUCCESS", step["error"]
    events = await event_log.run_events_between(db, submitted.run_id, 0, 2**62, 10_000)
    outputs = [e["payload"] for e in events if e["type"] == "step_output"]
    assert outputs[0]["text"].startswith("a\ufffdb\ufffd\ufffd c"), outputs[0]["text"][:20]
    assert "\0" not in "".join(p["text"] for p in outputs)
    assert sum(p["bytes"] for p in outputs) <= CAP_BYTES
    assert len(outputs) <= CAP_BYTES // EVENT_BYTES + 4, "the flood became many events"
    assert [e["type"] for e in events].count("step_output_truncated") == 1
