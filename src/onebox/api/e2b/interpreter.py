"""E2B's code interpreter (port 49999): ``POST /execute`` runs python in the session's
stateful interpreter (session_service.run_cell) and streams E2B's NDJSON lines: ``stdout`` /
``stderr`` as printed, ``result`` (text, html, png, json... and ``is_main_result``) as
displayed, then ``error`` (name, value, traceback) and ``number_of_executions``."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from onebox.api.e2b.connect import RpcError, while_allowed
from onebox.api.e2b.deps import INTERPRETER_PORT, Target, recheck, target
from onebox.errors import OneboxError, ValidationError
from onebox.runtime.services import session_service
from onebox.runtime.services.cell_stream import by_lines, cell_events
from onebox.sandbox.base import CellOutput, CellResult, OutputSink

router = APIRouter(prefix="/e2b/sandbox", tags=["e2b"], include_in_schema=False)
MIME_FIELDS = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown",
               "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
               "application/pdf": "pdf", "text/latex": "latex",
               "application/javascript": "javascript", "application/json": "json"}
PYTHON = ("python", "python3")
NO_CONTEXTS = ("code contexts are not supported: each onebox sandbox has one python "
               "interpreter; run_code without a context uses it")


class ExecuteBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    code: str = Field(max_length=1 << 20)
    context_id: str | None = Field(None, max_length=200)
    language: str | None = Field(None, max_length=40)
    env_vars: dict[str, str] | None = None


def check_body(body: ExecuteBody) -> None:
    if body.language is not None and body.language.lower() not in PYTHON:
        raise ValidationError(f"language {body.language!r} is not supported: onebox's code "
                              "interpreter runs python; run other code with commands.run()",
                              field="language")
    if body.context_id is not None:
        raise ValidationError(NO_CONTEXTS, field="context_id")


def result_line(data: dict[str, str], is_main_result: bool) -> dict[str, Any]:
    """An interpreter output (MIME -> text) as E2B's ``result`` line."""
    line: dict[str, Any] = {"type": "result", "is_main_result": is_main_result}
    extra: dict[str, str] = {}
    for mime, value in data.items():
        name = MIME_FIELDS.get(mime)
        if name == "json":
            line["json"] = _json_or_text(value)
        elif name == "text":
            line["text"] = _unquoted(value)
        elif name is not None:
            line[name] = value
        else:
            extra[mime] = value
    if extra:
        line["extra"] = extra
    return line


def _unquoted(text: str) -> str:
    """A string's repr without its quotes (``'teal'`` -> ``teal``), as E2B's server gives it."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def end_lines(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The error (the code's, or a timeout / lost interpreter) and the execution count."""
    lines = []
    error = result["error"]
    if error is None and (result["timed_out"] or result["state_lost"]):
        reason = result["restart_reason"] or "the interpreter was restarted"
        name = "TimeoutError" if result["timed_out"] else "InterpreterRestarted"
        error = {"name": name, "value": f"{reason}; variables and imports were lost",
                 "traceback": ""}
    if error is not None:
        lines.append({"type": "error", **error})
    lines.append({"type": "number_of_executions", "execution_count": result["execution_count"]})
    return lines


def _line(event: dict[str, Any]) -> list[dict[str, Any]]:
    kind = event["type"]
    if kind in ("stdout", "stderr"):
        return [{"type": kind, "text": event["text"], "timestamp": time.time_ns()}]
    if kind == "result":
        return [result_line(event["data"], event["is_main_result"])]
    return end_lines(event["result"])


async def _lines(t: Target, body: ExecuteBody) -> AsyncIterator[bytes]:
    async def call(on_output: OutputSink, on_result: Callable[[CellOutput], None]) -> CellResult:
        return await session_service.run_cell(
            t.api.db, t.api.backend, t.sandbox_id, code=body.code, env={**t.envs, **(body.env_vars or {})},
            on_output=on_output, on_result=on_result)

    try:
        async for event in by_lines(cell_events(call)):
            for line in _line(event):
                yield json.dumps(line).encode() + b"\n"
    except OneboxError as exc:
        failed = {"type": "error", "name": type(exc).__name__, "value": exc.message,
                  "traceback": ""}
        yield json.dumps(failed).encode() + b"\n"


@router.post("/execute")
async def execute(body: ExecuteBody, request: Request) -> Response:
    t = await target(request, INTERPRETER_PORT)
    check_body(body)
    lines = while_allowed(_lines(t, body), *recheck(request, INTERPRETER_PORT))
    return StreamingResponse(_until_revoked(lines), media_type="application/x-ndjson")


async def _until_revoked(lines: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The cell's lines; when access ends (a revoked key, a deleted sandbox) an error line,
    and the cell is stopped (its stream is closed, which cancels the cell)."""
    try:
        async for line in lines:
            yield line
    except RpcError as exc:
        ended = {"type": "error", "name": "Unauthorized", "value": exc.message, "traceback": ""}
        yield json.dumps(ended).encode() + b"\n"


@router.post("/contexts")
@router.get("/contexts")
@router.delete("/contexts/{context_id}")
@router.post("/contexts/{context_id}/restart")
async def contexts() -> JSONResponse:
    """Every context call gets the same refusal, before auth: the SDK sends these calls no
    access token, and the answer names no sandbox, reads nothing and changes nothing."""
    raise ValidationError(NO_CONTEXTS, field="context")
