"""Prometheus text exposition: the machine's load for everyone, each tenant's own figures.

Totals without a tenant in them (queue depth, running steps, live sandboxes, open
streams) are shown to any key; runs, sessions, step durations and blocked network
attempts are counted over the caller's tenant only and labelled ``tenant``.
"""

from __future__ import annotations

from typing import Any

from onebox.api.events import EventHub
from onebox.runtime.services import metrics
from onebox.runtime.services.metrics import BUCKETS_MS
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database


def _line(name: str, value: float, labels: dict[str, str] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}} {value:g}"
    return f"{name} {value:g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _header(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


async def render_metrics(db: Database, backend: SandboxBackend, hub: EventHub,
                         tenant_id: str) -> str:
    """Operator totals (no tenant in them) and the calling tenant's own figures, labelled
    ``tenant``; another tenant's figures are never in the text."""
    lines = await _totals(db, backend, hub)
    lines += _runs(await metrics.runs_by_status(db, tenant_id), tenant_id)
    lines += _tenant_sessions(await metrics.active_sessions(db, tenant_id), tenant_id)
    lines += _durations(await metrics.step_durations(db, tenant_id), tenant_id)
    blocked = await metrics.blocked_network_attempts(db, tenant_id)
    lines += _header("onebox_blocked_network_attempts_total", "counter",
                     "connections the egress proxy refused, in the tenant's runs")
    lines.append(_line("onebox_blocked_network_attempts_total", blocked, {"tenant": tenant_id}))
    return "\n".join(lines) + "\n"


async def _totals(db: Database, backend: SandboxBackend, hub: EventHub) -> list[str]:
    """What the operator of the machine watches: load, not anyone's data."""
    queue = await metrics.queue_totals(db)
    lines = _header("onebox_queue_depth", "gauge", "step attempts waiting to be claimed")
    lines.append(_line("onebox_queue_depth", queue.queued))
    lines += _header("onebox_steps_running", "gauge", "step attempts running now")
    lines.append(_line("onebox_steps_running", queue.running))
    lines += _header("onebox_approvals_waiting", "gauge", "approval steps waiting for a person")
    lines.append(_line("onebox_approvals_waiting", queue.waiting))
    live = getattr(backend, "live_sessions", None)
    lines += _header("onebox_live_sessions", "gauge", "sandbox sessions with a workspace")
    lines.append(_line("onebox_live_sessions", float(live() if callable(live) else 0)))
    lines += _header("onebox_sse_subscribers", "gauge", "open event streams")
    lines.append(_line("onebox_sse_subscribers", hub.subscribers))
    return lines


def _runs(counts: dict[str, int], tenant_id: str) -> list[str]:
    lines = _header("onebox_runs", "gauge", "the tenant's runs by status")
    for status, n in counts.items():
        lines.append(_line("onebox_runs", n, {"status": status, "tenant": tenant_id}))
    return lines


def _tenant_sessions(active: int, tenant_id: str) -> list[str]:
    lines = _header("onebox_active_sessions", "gauge", "the tenant's sessions recorded as active")
    lines.append(_line("onebox_active_sessions", active, {"tenant": tenant_id}))
    return lines


def _durations(rows: list[dict[str, Any]], tenant_id: str) -> list[str]:
    name = "onebox_step_duration_ms"
    lines = _header(name, "histogram", "duration of the tenant's finished step attempts")
    for row in rows:
        labels = {"status": str(row["status"]), "tenant": tenant_id}
        for bound in BUCKETS_MS:
            lines.append(_line(f"{name}_bucket", float(str(row[f"le_{bound}"])),
                               {**labels, "le": str(bound)}))
        lines.append(_line(f"{name}_bucket", float(str(row["n"])), {**labels, "le": "+Inf"}))
        lines.append(_line(f"{name}_sum", float(str(row["total_ms"])), labels))
        lines.append(_line(f"{name}_count", float(str(row["n"])), labels))
    return lines
