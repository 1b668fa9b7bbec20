"""`onebox exec` without a server: the session service in this process, tenant `default`.

Files persist in the session (the same rows and workspaces the API and snapshots know).
Python runs in the session's interpreter, so the last expression's value and rich results
come back as through a server, and output streams as it is printed; but the interpreter lives
in this process, so its state does not outlive the call.
"""

from __future__ import annotations

import codecs
import logging
from dataclasses import replace
from typing import Any

import psycopg

from onebox.cli import common
from onebox.cli.exec_output import ExecOptions, announce, live_callbacks, payload
from onebox.client.types import CellOutput, ExecResult
from onebox.config import Settings
from onebox.errors import OneboxError
from onebox.runtime.services import session_service as service
from onebox.sandbox.base import CellOutput as SandboxOutput
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

log = logging.getLogger(__name__)
TENANT = "default"
NOTE = ("no onebox server running: ran in-process (files persist in the session; interpreter "
        "state does not outlive this call; start `onebox serve` to keep it)")


async def run_in_process(settings: Settings, opts: ExecOptions) -> dict[str, Any]:
    from onebox.sandbox.registry import get_backend

    db = await Database.open(settings)
    backend = get_backend(settings)
    if not backend.has_interpreter and opts.language == "python" and not opts.stateless:
        common.err.print(f"onebox exec: the {backend.name!r} sandbox has no interpreter; "
                         "running the code stateless", markup=False, soft_wrap=True)
        opts = replace(opts, stateless=True)
    try:
        await _reclaim(db, backend)
        session_id = await _session(db, backend, opts)
        announce(session_id, opts)
        if opts.session is not None or opts.keep:
            common.err.print(f"onebox exec: {NOTE}", markup=False, soft_wrap=True)
        try:
            data = await _execute(db, backend, session_id, opts)
        finally:
            if opts.session is None and not opts.keep:
                await service.delete_session(db, backend, session_id, TENANT)
    finally:
        await backend.close()
        await db.close()
    printed = opts.live and opts.language == "python" and not opts.stateless
    return payload(ExecResult.from_json(data), session_id, "in-process", printed=printed)


async def _session(db: Database, backend: SandboxBackend, opts: ExecOptions) -> str:
    if opts.session is not None:
        await service.require_session(db, opts.session, TENANT)
        return opts.session
    row = await service.create_session(db, backend, TENANT, environment=opts.environment,
                                       owned=not opts.keep)
    return str(row["id"])


async def _reclaim(db: Database, backend: SandboxBackend) -> None:
    """Sessions of earlier in-process execs killed mid-call (their process ends its own
    session when it can): reclaimed before this one makes another."""
    try:
        await service.reclaim_abandoned(db, backend)
    except (OneboxError, OSError, psycopg.Error) as exc:  # this call goes on; the next retries
        log.warning("could not reclaim the sessions of killed `onebox exec`s: %s", exc)


async def _execute(db: Database, backend: SandboxBackend, session_id: str,
                   opts: ExecOptions) -> dict[str, Any]:
    if opts.language == "python" and not opts.stateless:
        cell = await service.run_cell(
            db, backend, session_id, code=opts.code, timeout_s=opts.timeout_s,
            memory_mb=opts.memory_mb, allow_domains=opts.allow_domains, **_live(opts))
        return service.cell_json(cell)
    result = await service.execute(
        db, backend, session_id, code=opts.code, language=opts.language,
        timeout_s=opts.timeout_s, memory_mb=opts.memory_mb, allow_domains=opts.allow_domains,
        stdin=None)
    return service.result_json(result)


def _live(opts: ExecOptions) -> dict[str, Any]:
    """Print the cell's output as it arrives (not with --json)."""
    if not opts.live:
        return {}

    out = live_callbacks()
    streams = {"stdout": out["on_stdout"], "stderr": out["on_stderr"]}
    decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in streams}

    def on_output(stream: str, data: bytes) -> None:
        name = stream if stream in streams else "stderr"
        streams[name](decoders[name].decode(data))

    def on_result(output: SandboxOutput) -> None:
        out["on_result"](CellOutput(dict(output.data), output.is_main_result))

    return {"on_output": on_output, "on_result": on_result}
