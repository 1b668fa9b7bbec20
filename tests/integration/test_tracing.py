"""Tracing: the spans of a run share the run's trace_id; log records carry the run context."""

from __future__ import annotations

import logging

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.engine.tracing import ContextFilter, bound
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(tp)


async def test_run_step_and_sandbox_spans_share_the_run_trace(db: Database, settings: Settings) -> None:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    backend = get_backend(settings)
    try:
        rt = Runtime(settings, db, backend)
        final = await rt.run_plan(parse_plan({"steps": [
            {"id": "a", "tool": "bash", "code": "true"},
            {"id": "b", "tool": "bash", "code": "true", "depends_on": ["a"]}]}))
    finally:
        await backend.close()
    assert final["status"] == "SUCCEEDED"
    spans = [s for s in EXPORTER.get_finished_spans()
             if s.context.trace_id == int(final["trace_id"], 16)]
    names = sorted(s.name for s in spans)
    assert names == ["run", "sandbox.exec", "sandbox.exec", "step", "step"]
    steps = {s.attributes["onebox.step_id"]: s for s in spans if s.name == "step"}
    assert set(steps) == {"a", "b"}
    run_span = next(s for s in spans if s.name == "run")
    assert all(s.parent.span_id == run_span.context.span_id for s in steps.values())
    for exec_span in (s for s in spans if s.name == "sandbox.exec"):
        assert exec_span.parent.span_id in {s.context.span_id for s in steps.values()}


def test_log_records_carry_run_step_and_trace() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    with bound(run_id="r-1", step="fetch", trace_id="ab" * 16):
        assert ContextFilter().filter(record)
    assert (record.run_id, record.step, record.trace_id) == ("r-1", "fetch", "ab" * 16)
    outside = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    ContextFilter().filter(outside)
    assert outside.trace_id == "-"
