"""Prometheus text exposition of what an operator watches: queue, sessions, steps, egress."""

from __future__ import annotations

from onebox.api.events import EventHub
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.store.queries import load_queries

Q = load_queries("api")
BUCKETS_MS = (10, 50, 100, 500, 1000, 5000, 30000, 300000)


def _line(name: str, value: float, labels: dict[str, str] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}} {value:g}"
    return f"{name} {value:g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _header(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


async def render_metrics(db: Database, backend: SandboxBackend, hub: EventHub) -> str:
    queue = await db.fetchone(Q["metrics_queue"]) or {}
    lines = _header("onebox_queue_depth", "gauge", "step attempts waiting to be claimed")
    lines.append(_line("onebox_queue_depth", queue.get("queued") or 0))
    lines += _header("onebox_steps_running", "gauge", "step attempts running now")
    lines.append(_line("onebox_steps_running", queue.get("running") or 0))
    lines += _header("onebox_approvals_waiting", "gauge", "approval steps waiting for a person")
    lines.append(_line("onebox_approvals_waiting", queue.get("waiting") or 0))
    lines += _runs(await db.fetch(Q["metrics_runs"]))
    lines += _sessions(backend, await db.fetchone(Q["metrics_sessions"]) or {})
    lines += _durations(await db.fetch(Q["metrics_durations"]))
    blocked = await db.fetchone(Q["metrics_blocked"]) or {}
    lines += _header("onebox_blocked_network_attempts_total", "counter",
                     "connections the egress proxy refused")
    lines.append(_line("onebox_blocked_network_attempts_total", blocked.get("n") or 0))
    lines += _header("onebox_sse_subscribers", "gauge", "open event streams")
    lines.append(_line("onebox_sse_subscribers", hub.subscribers))
    return "\n".join(lines) + "\n"


def _runs(rows: list[dict[str, object]]) -> list[str]:
    lines = _header("onebox_runs", "gauge", "runs by status")
    for row in rows:
        lines.append(_line("onebox_runs", float(str(row["n"])), {"status": str(row["status"])}))
    return lines


def _sessions(backend: SandboxBackend, row: dict[str, object]) -> list[str]:
    live = getattr(backend, "live_sessions", None)
    count = live() if callable(live) else float(str(row.get("n") or 0))
    lines = _header("onebox_live_sessions", "gauge", "sandbox sessions with a workspace")
    lines.append(_line("onebox_live_sessions", float(count)))
    lines += _header("onebox_active_sessions", "gauge", "sessions recorded as active")
    lines.append(_line("onebox_active_sessions", float(str(row.get("n") or 0))))
    return lines


def _durations(rows: list[dict[str, object]]) -> list[str]:
    name = "onebox_step_duration_ms"
    lines = _header(name, "histogram", "duration of finished step attempts, by status")
    for row in rows:
        status = str(row["status"])
        for bound in BUCKETS_MS:
            lines.append(_line(f"{name}_bucket", float(str(row[f"le_{bound}"])),
                               {"status": status, "le": str(bound)}))
        lines.append(_line(f"{name}_bucket", float(str(row["n"])), {"status": status, "le": "+Inf"}))
        lines.append(_line(f"{name}_sum", float(str(row["total_ms"])), {"status": status}))
        lines.append(_line(f"{name}_count", float(str(row["n"])), {"status": status}))
    return lines
