"""Trace context: the run's trace_id in every log line, and OpenTelemetry spans.

Every run has a 32-hex-digit ``trace_id`` (stored on the run, its events and its step rows).
Log records get ``run_id``, ``step`` and ``trace_id`` attributes from context variables
(add :class:`ContextFilter` to your handler; the CLI does). Spans ``run``, ``step`` and
``sandbox.exec`` are created through the OpenTelemetry API and use the run's trace_id as
their trace id, so the spans of one run, from any number of workers, form one trace. They
cost nothing unless an SDK is configured: the CLI configures one when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and the ``otel`` extra is installed.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

log = logging.getLogger(__name__)
tracer = trace.get_tracer("onebox")

_run_id: contextvars.ContextVar[str] = contextvars.ContextVar("onebox_run_id", default="-")
_step: contextvars.ContextVar[str] = contextvars.ContextVar("onebox_step", default="-")
_trace_id: contextvars.ContextVar[str] = contextvars.ContextVar("onebox_trace_id", default="-")


class ContextFilter(logging.Filter):
    """Adds run_id, step and trace_id of the current task to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = _run_id.get()
        record.step = _step.get()
        record.trace_id = _trace_id.get()
        return True


LOG_FORMAT = "%(levelname)s %(name)s [run=%(run_id)s step=%(step)s trace=%(trace_id)s] %(message)s"


@contextmanager
def bound(*, run_id: Any = None, step: str | None = None, trace_id: str | None = None) -> Iterator[None]:
    """Set the log context for the current task (asyncio tasks copy it when created)."""
    tokens = [var.set(str(value)) for var, value in
              ((_run_id, run_id), (_step, step), (_trace_id, trace_id)) if value is not None]
    try:
        yield
    finally:
        for token in reversed(tokens):
            token.var.reset(token)


def _parent(trace_id: str) -> Any:
    """A remote parent carrying the run's trace id, so all its spans share one trace."""
    try:
        tid = int(trace_id, 16)
    except ValueError:
        return None
    ctx = SpanContext(trace_id=tid, span_id=int(secrets.token_hex(8), 16), is_remote=True,
                      trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(ctx))


@contextmanager
def span(name: str, trace_id: str | None, **attributes: Any) -> Iterator[trace.Span]:
    """A span named ``name`` in the run's trace (when ``trace_id`` is given)."""
    current = trace.get_current_span().get_span_context()
    context = None if current.is_valid or trace_id is None else _parent(trace_id)
    attrs = {f"onebox.{k}": str(v) for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(name, context=context, attributes=attrs) as s:
        yield s


def configure_exporter(endpoint: str | None) -> bool:
    """Install an OTLP/HTTP span exporter when an endpoint is set and the SDK is installed."""
    if not endpoint:
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is missing: "
                    "pip install 'onebox[otel]'")
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": "onebox"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True
