"""E2B compatibility: the unmodified ``e2b`` / ``e2b-code-interpreter`` SDKs against onebox.

    E2B_API_URL=http://127.0.0.1:8000/e2b
    E2B_SANDBOX_URL=http://127.0.0.1:8000/e2b/sandbox
    E2B_API_KEY=<a onebox API key>

``router`` holds the control API (control.py), envd's filesystem and process services
(envd.py, process.py) and the code interpreter (interpreter.py); its lifespan runs the
sweeper that deletes sandboxes past their timeout. docs/e2b.md says what is supported.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from onebox.api.e2b import control, envd, interpreter, process
from onebox.api.e2b.deps import E2bState
from onebox.runtime.e2b.sandboxes import expire_forever


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state = app.state.e2b = E2bState()
    api = getattr(app.state, "onebox", None)
    if api is not None:
        state.sweeper = asyncio.create_task(expire_forever(
            api.db, api.backend, lambda: api.server_id, api.settings.api.server_lease_s))
    try:
        yield
    finally:
        if state.sweeper is not None:
            state.sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await state.sweeper
        await state.processes.close()


router = APIRouter(lifespan=_lifespan)
for _module in (control, envd, process, interpreter):
    router.include_router(_module.router)

__all__ = ["router"]
