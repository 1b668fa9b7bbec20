"""E2B's envd ``process.Process`` Connect service: ``commands.run`` (foreground and
background), ``kill`` and ``list``, each command one bash execution in the session's sandbox
(runtime/e2b_commands). No PTY and no stdin."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from onebox.api.e2b import connect
from onebox.api.e2b.deps import ENVD_PORT, Target, recheck, target
from onebox.errors import ValidationError
from onebox.runtime.e2b import commands as e2b_commands
from onebox.runtime.e2b import files as e2b_files
from onebox.runtime.e2b.commands import E2bProcess, ExitInfo, Listener

router = APIRouter(prefix="/e2b/sandbox/process.Process", tags=["e2b"], include_in_schema=False)
SIGNALS = ("SIGNAL_SIGKILL", "SIGNAL_SIGTERM", 9, 15)


def _event(kind: str, value: object) -> dict[str, Any]:
    if kind == "start":
        return {"event": {"start": {"pid": value}}}
    if kind == "end":
        assert isinstance(value, ExitInfo)
        end: dict[str, Any] = {"exitCode": value.exit_code, "exited": value.exited,
                               "status": value.status}
        if value.error:
            end["error"] = value.error
        return {"event": {"end": end}}
    assert isinstance(value, bytes)
    return {"event": {"data": {kind: base64.b64encode(value).decode()}}}


async def _messages(proc: E2bProcess, listener: Listener) -> AsyncIterator[dict[str, Any]]:
    async for kind, value in e2b_commands.events(proc, listener):
        yield _event(kind, value)


def _start(t: Target, message: dict[str, Any],
           timeout_s: float | None) -> tuple[E2bProcess, Listener]:
    if message.get("pty"):
        raise connect.RpcError("unimplemented", "PTYs are not supported by onebox; run the "
                               "command with commands.run() instead")
    config = message.get("process") or {}
    args = config.get("args") or []
    if config.get("cmd") != "/bin/bash" or len(args) != 3 or args[:2] != ["-l", "-c"]:
        raise ValidationError("onebox runs commands as E2B's commands.run sends them "
                              "(/bin/bash -l -c CMD)", field="process.cmd")
    envs = config.get("envs") or {}
    if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
        raise ValidationError("envs must map names to strings", field="process.envs")
    cwd = e2b_files.to_workspace(config.get("cwd") or e2b_files.HOME, "process.cwd")
    return t.e2b.processes.start(
        t.api.db, t.api.backend, session_id=t.sandbox_id, tenant_id=t.tenant_id,
        cmd=str(args[2]), cwd=cwd or ".", envs={**t.envs, **envs}, timeout_s=timeout_s)


@router.post("/Start")
async def start(request: Request) -> Response:
    try:
        t = await target(request, ENVD_PORT)
        proc, listener = _start(t, await connect.stream_body(request),
                                 connect.timeout_s(request))
    except Exception as exc:  # noqa: BLE001 # swallow-ok: a Connect error at the stream's end; unknown ones logged
        return connect.error_stream(exc)
    return connect.stream_response(_messages(proc, listener), *recheck(request, ENVD_PORT))


def _pid(message: dict[str, Any]) -> int:
    selector = message.get("process") or {}
    pid = selector.get("pid")
    if not isinstance(pid, int):
        raise ValidationError("select the process by pid", field="process.pid")
    return pid


@router.post("/Connect")
async def reconnect(request: Request) -> Response:
    try:
        t = await target(request, ENVD_PORT)
        pid = _pid(await connect.stream_body(request))
        proc = t.e2b.processes.get(pid, t.sandbox_id, t.tenant_id)
        if proc is None:
            raise connect.RpcError("not_found", f"process {pid} is not running")
    except Exception as exc:  # noqa: BLE001 # swallow-ok: a Connect error at the stream's end; unknown ones logged
        return connect.error_stream(exc)
    return connect.stream_response(_messages(proc, proc.subscribe()),
                                   *recheck(request, ENVD_PORT))


async def _unary(request: Request) -> tuple[Target, dict[str, Any]]:
    return await target(request, ENVD_PORT), await connect.unary_body(request)


@router.post("/SendSignal")
async def send_signal(request: Request) -> Response:
    try:
        t, message = await _unary(request)
        pid = _pid(message)
        if message.get("signal") not in SIGNALS:
            raise ValidationError("onebox sends SIGKILL or SIGTERM only", field="signal")
        if not t.e2b.processes.kill(pid, t.sandbox_id, t.tenant_id):
            raise connect.RpcError("not_found", f"process {pid} is not running")
        return JSONResponse({})
    except Exception as exc:  # noqa: BLE001 # swallow-ok: unary_error re-raises what it does not know (then logged as a 500)
        return connect.unary_error(exc)


@router.post("/List")
async def list_processes(request: Request) -> Response:
    try:
        t, _message = await _unary(request)
        running = t.e2b.processes.of_session(t.sandbox_id, t.tenant_id)
        return JSONResponse({"processes": [
            {"pid": p.pid, "config": {"cmd": "/bin/bash", "args": ["-l", "-c", p.cmd],
                                      "envs": {}, "cwd": e2b_files.to_e2b(p.cwd.strip("."))}}
            for p in running]})
    except Exception as exc:  # noqa: BLE001 # swallow-ok: unary_error re-raises what it does not know (then logged as a 500)
        return connect.unary_error(exc)


@router.post("/{method}")
async def unsupported(method: str, request: Request) -> Response:
    try:  # the caller and sandbox first: no answer about a sandbox that is not the caller's
        await target(request, ENVD_PORT)
    except Exception as exc:  # noqa: BLE001 # swallow-ok: unary_error re-raises what it does not know (then logged as a 500)
        return connect.unary_error(exc)
    return connect.unary_error(connect.RpcError(
        "unimplemented", f"process.{method[:40]} is not supported by onebox (no stdin, no PTY; "
        "see docs/e2b.md)"))
