"""A code step's limits are resolved in one place (sandbox.policy.resolve_limits): the replay
record holds exactly what the sandbox ran under, the output bound included."""

from __future__ import annotations

from pathlib import Path

from onebox.agent.plan import parse_plan
from onebox.config import load_settings
from onebox.runtime.engine.executor import build_request, request_details


def test_the_replay_record_holds_the_limits_the_sandbox_resolves(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    plan = parse_plan({"name": "p", "steps": [
        {"id": "s", "tool": "python", "code": "print(1)", "limits": {"timeout_s": 5}}]})
    step = plan.step("s")
    request = build_request(step, {"session_id": "run-x", "trace_id": "t"}, settings)
    limits = request_details(step, request, settings)["limits"]
    assert limits["timeout_s"] == 5
    assert limits["memory_mb"] == settings.sandbox.memory_mb
    assert limits["max_output_bytes"] == settings.sandbox.max_output_bytes
