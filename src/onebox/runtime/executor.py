"""Running one claimed attempt in the sandbox and turning the result into an Outcome."""

from __future__ import annotations

import logging
from typing import Any

from onebox.agent.plan import Step
from onebox.config import Settings
from onebox.errors import SandboxError
from onebox.runtime.archive import Outcome, outcome_from_result
from onebox.runtime.tracing import span
from onebox.sandbox.base import ExecRequest, Limits, NetworkPolicy, SandboxBackend
from onebox.store import runs as store

log = logging.getLogger(__name__)


def build_request(step: Step, row: store.Row, settings: Settings) -> ExecRequest:
    """The sandbox request for one attempt: the step's code, limits and network grant."""
    lim = step.limits
    return ExecRequest(
        session_id=row["session_id"],
        code=step.code,
        language=step.tool or "python",
        limits=Limits(
            timeout_s=lim.timeout_s, memory_mb=lim.memory_mb, cpus=lim.cpus, pids=lim.pids,
            disk_mb=lim.disk_mb,
        ),
        network=NetworkPolicy(allow_domains=step.allow_domains),
        trace_id=row["trace_id"],
    )


def request_details(step: Step, request: ExecRequest, settings: Settings) -> dict[str, Any]:
    """What is needed to replay the attempt later: code, language, effective limits, grants."""
    lim, defaults = request.limits, settings.sandbox
    return {
        "code": step.code,
        "language": step.tool,
        "limits": {
            "timeout_s": lim.timeout_s or defaults.timeout_s,
            "memory_mb": lim.memory_mb or defaults.memory_mb,
            "cpus": lim.cpus or defaults.cpus,
            "pids": lim.pids or defaults.pids,
            "disk_mb": lim.disk_mb or defaults.disk_mb,
        },
        "allow_domains": list(step.allow_domains),
    }


async def execute_step(
    backend: SandboxBackend, settings: Settings, step: Step, row: store.Row
) -> Outcome:
    """Run the attempt. A failure of the sandbox itself is a FAILED outcome, not a crash."""
    request = build_request(step, row, settings)
    details = request_details(step, request, settings)
    if step.kind != "code" or step.code is None:
        return Outcome("FAILED", details=details, error=(
            f"step {step.id}: steps of kind '{step.kind}'"
            + ("" if step.code else " without code") + " need the agent runtime; "
            "plan files run code steps (tool + code)"))
    try:
        with span("sandbox.exec", row["trace_id"], backend=backend.name, session=row["session_id"]):
            result = await backend.execute(request)
    except Exception as exc:
        log.warning("sandbox could not run step %s: %s", row["step_id"], exc,
                    exc_info=not isinstance(exc, SandboxError))
        return Outcome("FAILED", error=sandbox_failure(exc), details=details)
    return outcome_from_result(result, details)


def sandbox_failure(exc: Exception) -> str:
    """The reason a backend could not run a step. A SandboxError says it in its message;
    anything else (an OSError of a cgroup write, a bug) is named with its type."""
    if isinstance(exc, SandboxError):
        return f"sandbox error: {exc}"
    return f"sandbox error: {type(exc).__name__}: {exc}"
