"""Three API servers of one database, each with its own home and sandbox root (three hosts'
disks), one object store: a session made through one is usable through every other.

Each server listens on its own loopback port and advertises it (``api.advertise_url``); a
request for a session another server holds is forwarded over HTTP to that server.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from api_helpers import start_server

from onebox.api import create_app
from onebox.config import Settings, load_settings
from onebox.objects.fs import FsObjectStore
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.registry import get_backend
from onebox.store.db import Database

T = TypeVar("T")


@dataclass
class Server:
    name: str
    url: str
    backend: SandboxBackend
    app: Any
    uvicorn: uvicorn.Server
    task: asyncio.Task[None]

    @property
    def state(self) -> Any:
        return self.app.state.onebox

    def has_copy(self, session_id: str) -> bool:
        return self.backend.workspace(session_id).exists()

    async def stop(self) -> None:
        self.uvicorn.should_exit = True
        await self.task


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _host_settings(settings: Settings, home: Path, port: int) -> Settings:
    host = load_settings(home=home, database_url=settings.database_url,
                         sandbox=settings.sandbox.model_copy(), runtime=settings.runtime)
    host.api = settings.api.model_copy(update={
        "port": port, "advertise_url": f"http://127.0.0.1:{port}", "server_heartbeat_s": 0.2,
        "server_lease_s": 1.5, "session_snapshot_s": 0})
    return host


async def _start(name: str, db: Database, settings: Settings, objects: FsObjectStore,
                 home: Path) -> Server:
    port = _free_port()
    host = _host_settings(settings, home, port)
    backend = get_backend(host)
    app = create_app(host, runtime=Runtime(host, db, backend, objects=objects))
    server, task, url = await start_server(app, port)  # the port it advertises
    return Server(name, url, backend, app, server, task)


@dataclass
class Cluster:
    servers: list[Server]
    keys: dict[str, str]
    objects: FsObjectStore

    def client(self, n: int, tenant: str = "acme") -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.servers[n].url, timeout=60,
                                 headers={"Authorization": f"Bearer {self.keys[tenant]}"})


@pytest.fixture
async def cluster(db: Database, settings: Settings, tmp_path: Path) -> AsyncIterator[Cluster]:
    objects = FsObjectStore(tmp_path / "shared-objects", fsync=False)
    keys = {t: (await create_key(db, tenant_id=t, name=f"{t}-test"))[0]
            for t in ("acme", "globex")}
    servers = [await _start(f"s{n}", db, settings, objects, tmp_path / f"host-{n}")
               for n in range(3)]
    try:
        yield Cluster(servers, keys, objects)
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                await server.stop()
            await server.backend.close()
        await objects.close()


async def _cell(client: httpx.AsyncClient, session: str, code: str) -> httpx.Response:
    return await client.post(f"/v1/sessions/{session}/execute",
                             json={"code": code, "language": "python"})


async def test_a_session_made_on_one_server_serves_through_every_other(cluster: Cluster) -> None:
    async with cluster.client(0) as one, cluster.client(1) as two, cluster.client(2) as three:
        made = await one.post("/v1/sessions")
        assert made.status_code == 201, made.text
        session = made.json()["id"]
        wrote = await two.post(f"/v1/sessions/{session}/execute",
                               json={"code": "echo routed > note.txt", "language": "bash"})
        assert wrote.status_code == 200 and wrote.json()["exit_code"] == 0, wrote.text
        read = await three.get(f"/v1/sessions/{session}/files/note.txt")
        assert read.status_code == 200 and read.text == "routed\n", read.text
        listed = await three.get(f"/v1/sessions/{session}/files")
        assert [f["path"] for f in listed.json()["files"]] == ["note.txt"]
        # one interpreter: a variable set through server 2 is there through server 3
        assert (await _cell(two, session, "x = 41")).status_code == 200
        answer = await _cell(three, session, "print(x + 1)")
        assert answer.json()["stdout"] == "42\n", answer.text
    holder, *others = cluster.servers
    assert holder.has_copy(session)
    assert not any(s.has_copy(session) for s in others), "only the holder has a workspace"
    async with cluster.client(2, tenant="globex") as stranger:
        # another tenant gets "not found" through a server that forwards, as on the holder
        assert (await stranger.get(f"/v1/sessions/{session}/files")).status_code == 404
    async with cluster.client(1) as two:
        assert (await two.delete(f"/v1/sessions/{session}")).status_code == 204
    assert not holder.has_copy(session), "deleting through another server freed the holder's"


async def sdk(fn: Callable[[], T]) -> T:
    return await asyncio.to_thread(fn)


async def test_an_e2b_sandbox_made_through_server_1_is_used_through_2_and_3(
        cluster: Cluster) -> None:
    from e2b import Sandbox, SandboxQuery

    urls = [s.url for s in cluster.servers]
    key = cluster.keys["acme"]

    def via(n: int) -> dict[str, str]:
        return {"api_key": key, "api_url": f"{urls[n]}/e2b",
                "sandbox_url": f"{urls[n]}/e2b/sandbox"}

    def flow() -> dict[str, Any]:
        made = Sandbox.create(metadata={"job": "routing"}, timeout=120, **via(0))
        two = Sandbox.connect(made.sandbox_id, **via(1))
        two.files.write("/home/user/data.txt", "from two")
        three = Sandbox.connect(made.sandbox_id, **via(2))
        ran = three.commands.run("cat /home/user/data.txt && echo $JOB_ENV",
                                 envs={"JOB_ENV": "ok"})
        info = Sandbox.get_info(made.sandbox_id, **via(2))
        listed = Sandbox.list(query=SandboxQuery(metadata={"job": "routing"}),
                              **via(1)).next_items()
        three.set_timeout(600)
        later = Sandbox.get_info(made.sandbox_id, **via(1))
        return {"id": made.sandbox_id, "stdout": ran.stdout, "info": info, "later": later,
                "listed": [s.sandbox_id for s in listed],
                "killed": Sandbox.kill(made.sandbox_id, **via(1))}

    out = await sdk(flow)
    assert out["stdout"] == "from twook\n"  # the file has no newline of its own
    assert out["info"].metadata == {"job": "routing"}, "metadata is the database's, not one server's"
    assert out["listed"] == [out["id"]]
    assert (out["later"].end_at - out["info"].end_at).total_seconds() > 400
    assert out["killed"]
    assert not any(s.has_copy(out["id"]) for s in cluster.servers)


async def test_a_stopping_server_hands_its_sessions_to_the_next_request(
        cluster: Cluster) -> None:
    holder = cluster.servers[0]
    async with cluster.client(0) as one:
        session = (await one.post("/v1/sessions")).json()["id"]
        await one.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo kept > kept.txt", "language": "bash"})
        assert (await _cell(one, session, "y = 7")).status_code == 200
    await holder.stop()  # a clean stop: snapshot what it holds, then leave
    async with cluster.client(1) as two:
        read = await two.get(f"/v1/sessions/{session}/files/kept.txt")
        assert read.status_code == 200 and read.text == "kept\n", read.text
        moved = read.headers.get("onebox-session-moved", "")
        assert "interpreter" in moved and "restored from snapshot" in moved, moved
        lost = await _cell(two, session, "print(y)")
        assert "NameError" in lost.text, "the interpreter's state did not travel (and we say so)"
        assert lost.json()["state_lost"] is True and "moved from server" in \
            lost.json()["restart_reason"], lost.json()
    async with cluster.client(2) as three:  # now held by server 2: 3 forwards there
        again = await three.get(f"/v1/sessions/{session}/files/kept.txt")
        assert again.status_code == 200 and "onebox-session-moved" not in again.headers
    assert cluster.servers[1].has_copy(session) and not cluster.servers[2].has_copy(session)


async def test_a_session_held_here_is_served_without_a_routing_query(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder serves its own sessions without asking the database who holds them (one
    server, or the holder of a cluster); a server that may have lost its lease asks again."""
    import time

    from onebox.runtime.services import session_holders as holders

    asked: list[str] = []
    holder_of = holders.holder_of

    async def counted(db: Database, session_id: str, lease_s: float) -> Any:
        asked.append(session_id)
        return await holder_of(db, session_id, lease_s)

    monkeypatch.setattr(holders, "holder_of", counted)
    holder = cluster.servers[0]
    async with cluster.client(0) as one, cluster.client(1) as two:
        session = (await one.post("/v1/sessions")).json()["id"]
        assert (await _cell(one, session, "1")).status_code == 200  # its sandbox is made
        for _ in range(100):  # a heartbeat after the session was made
            if holder.state.local_is_mine_until > time.monotonic():
                break
            await asyncio.sleep(0.05)
        asked.clear()
        for n in range(5):
            wrote = await _cell(one, session, f"open('n{n}.txt', 'w').write('{n}')")
            assert wrote.status_code == 200, wrote.text
        assert (await one.get(f"/v1/sessions/{session}/files/n4.txt")).text == "4"
        assert asked == [], "the holder asked who holds its own session"
        assert (await two.get(f"/v1/sessions/{session}/files/n3.txt")).text == "3"
        assert session in asked, "another server must still look the holder up"
        asked.clear()
        holder.state.local_is_mine_until = 0.0  # as after a freeze: the lease may be gone
        assert (await one.get(f"/v1/sessions/{session}/files/n2.txt")).text == "2"
        assert asked == [session]


async def test_a_silent_holder_loses_its_session_and_drops_its_copy_when_back(
        db: Database, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from onebox.runtime.services import session_holders as holders

    holder, taker, _ = cluster.servers
    async with cluster.client(0) as one:
        session = (await one.post("/v1/sessions")).json()["id"]
        await one.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo v1 > state.txt", "language": "bash"})
        saved = await holders.checkpoint(db, cluster.objects, holder.backend,
                                         holder.state.server)
        assert saved == [session]
        await one.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo after-snapshot > late.txt", "language": "bash"})
    # the holder is cut off: its heartbeats (and its sweeps) stop reaching the database
    me = holder.state.server
    beat, sweep = holders.heartbeat, holders.sweep
    monkeypatch.setattr(holders, "heartbeat", _unless(me.id, beat))
    monkeypatch.setattr(holders, "sweep", _unless(me.id, sweep))
    await _silenced(db, me.id)
    async with cluster.client(1) as two:
        read = await two.get(f"/v1/sessions/{session}/files/state.txt")
        assert read.status_code == 200 and read.text == "v1\n"
        assert "has not heartbeated" in read.headers["onebox-session-moved"]
        files = [f["path"] for f in (await two.get(f"/v1/sessions/{session}/files"))
                 .json()["files"]]
        assert files == ["state.txt"], "what changed after the newest snapshot is lost"
        await two.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo v2 > state.txt", "language": "bash"})
    assert holder.has_copy(session), "the probe's precondition: the old holder's stale copy"
    monkeypatch.setattr(holders, "heartbeat", beat)
    monkeypatch.setattr(holders, "sweep", sweep)
    for _ in range(100):  # back: its next heartbeat's sweep drops the copy it lost
        if not holder.has_copy(session):
            break
        await asyncio.sleep(0.05)
    assert not holder.has_copy(session)
    async with cluster.client(0) as one:  # and a request to it goes to the new holder
        read = await one.get(f"/v1/sessions/{session}/files/state.txt")
        assert read.text == "v2\n"
    assert taker.has_copy(session)


async def _silenced(db: Database, server: str) -> None:
    """Date ``server``'s last heartbeat an hour back, and again if a heartbeat that was
    already on its way (started before the patch) lands after it: under load it did, and the
    holder still looked alive."""
    for _ in range(20):
        await db.fetch("UPDATE onebox.api_servers SET seen_at = now() - interval '1 hour' "
                       "WHERE id = %(id)s RETURNING id", {"id": server})
        await asyncio.sleep(0.2)
        row = await db.fetchone("SELECT seen_at < now() - interval '30 minutes' AS old "
                                "FROM onebox.api_servers WHERE id = %(id)s", {"id": server})
        if row is not None and row["old"]:
            return
    raise AssertionError(f"server {server} kept heartbeating after it was cut off")


def _unless(silent: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` for every server but ``silent`` (a server cut off from the database)."""
    async def cut_off(db: Database, backend_or_me: Any, *rest: Any) -> Any:
        me = rest[0] if rest else backend_or_me
        if me.id != silent:
            return await call(db, backend_or_me, *rest)
        return None
    return cut_off


async def test_a_session_with_a_running_process_is_checkpointed_without_stalling_it(
        db: Database, cluster: Cluster) -> None:
    """Issue 36, observation 5: a session running a long process was never checkpointed
    (every pass gave up, "stayed busy"), its calls stalled behind the pass, and its files
    were gone when its server died."""
    import time

    from onebox.runtime.services import session_holders as holders
    from onebox.sandbox.snapshots import load_manifest

    holder = cluster.servers[0]
    async with cluster.client(0) as one:
        session = (await one.post("/v1/sessions")).json()["id"]
        running = asyncio.create_task(one.post(
            f"/v1/sessions/{session}/execute",
            json={"code": "echo started > bg.txt; sleep 6", "language": "bash",
                  "timeout_s": 10}))
        for _ in range(200):
            if (holder.backend.workspace(session) / "bg.txt").exists():
                break
            await asyncio.sleep(0.05)
        await one.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo mine > kept.txt", "language": "bash"})
        passing = asyncio.create_task(holders.checkpoint(
            db, cluster.objects, holder.backend, holder.state.server, wait_s=4))
        began = time.monotonic()
        wrote = await one.post(f"/v1/sessions/{session}/execute",
                               json={"code": "echo during > during.txt", "language": "bash"})
        assert wrote.status_code == 200 and time.monotonic() - began < 5, \
            "a call waited behind the checkpoint"
        assert await passing == [session], "the session with a running process was skipped"
        assert not running.done(), "the probe's precondition: the process still runs"
        running.cancel()
    [row] = await db.fetch("SELECT sha256 FROM onebox.snapshots WHERE session_id = %s "
                           "AND status = 'READY' ORDER BY created_at DESC LIMIT 1", (session,))
    manifest = await load_manifest(cluster.objects, str(row["sha256"]).strip())
    assert {"bg.txt", "kept.txt"} <= {e.path for e in manifest.files()}


async def test_a_request_for_a_frozen_holder_gets_a_quick_503(
        db: Database, cluster: Cluster) -> None:
    """Issue 37, case 7: a request forwarded to a holder that is alive but frozen (SIGSTOP)
    hung until the client gave up (120 s); a frozen server stops heartbeating, and the
    forward ends with 503 and Retry-After a few missed beats later."""
    import time

    from onebox.runtime.services import session_holders as holders

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 20)
        await asyncio.sleep(3600)

    frozen = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = frozen.sockets[0].getsockname()[1]
    try:
        async with cluster.client(0) as one, cluster.client(1) as two:
            session = (await one.post("/v1/sessions")).json()["id"]
            await holders.register(db, holders.ServerIdentity(
                "frozen-host:1:x", f"http://127.0.0.1:{port}", "frozen-host"))
            await db.fetch("UPDATE onebox.sessions SET holder = 'frozen-host:1:x' "
                           "WHERE id = %s RETURNING id", (session,))
            began = time.monotonic()
            got = await two.get(f"/v1/sessions/{session}/files", timeout=30)
            assert got.status_code == 503 and got.headers.get("retry-after"), got.text
            assert got.json()["code"] == "session_server_unreachable"
            assert time.monotonic() - began < 10
    finally:
        frozen.close()
