"""`onebox exec` without a server: the session service in this process, tenant `default`.

Files persist in the session (the same rows and workspaces the API and snapshots know);
interpreter state does not outlive the call, and the output prints when the call ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onebox.cli import common
from onebox.client.types import ExecResult
from onebox.config import Settings
from onebox.runtime import session_service as service
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

if TYPE_CHECKING:
    from onebox.cli.exec import ExecOptions

TENANT = "default"
NOTE = ("no onebox server running: ran in-process (files persist in the session; interpreter "
        "state does not outlive this call; start `onebox serve` to keep it)")


async def run_in_process(settings: Settings, opts: ExecOptions) -> dict[str, Any]:
    from onebox.cli.exec import announce, payload
    from onebox.sandbox.registry import get_backend

    db = await Database.open(settings)
    backend = get_backend(settings)
    try:
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
    return payload(ExecResult.from_json(data), session_id, "in-process")


async def _session(db: Database, backend: SandboxBackend, opts: ExecOptions) -> str:
    if opts.environment is not None:
        from onebox.errors import ValidationError

        raise ValidationError("--env needs a running onebox server for now (`onebox serve`, "
                              "or ONEBOX_URL): the in-process path runs without environments",
                              field="--env")
    if opts.session is not None:
        await service.require_session(db, opts.session, TENANT)
        return opts.session
    row = await service.create_session(db, backend, TENANT)
    return str(row["id"])


async def _execute(db: Database, backend: SandboxBackend, session_id: str,
                   opts: ExecOptions) -> dict[str, Any]:
    result = await service.execute(
        db, backend, session_id, code=opts.code, language=opts.language,
        timeout_s=opts.timeout_s, memory_mb=opts.memory_mb, allow_domains=opts.allow_domains,
        stdin=None)
    return service.result_json(result)
