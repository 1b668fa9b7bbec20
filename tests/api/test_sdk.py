"""The Python SDK (Client, AsyncClient) against a live `onebox up`: a subprocess on a free
loopback port, real TCP, the real database, sandbox and worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from onebox import AsyncClient, Client, NotFound, ServerUnreachable, Unauthorized, ValidationError
from onebox.client import CellOutput
from onebox.errors import PlanError

ONEBOX = str(Path(sys.executable).with_name("onebox"))
PLAN = """
name: sdk
steps:
  - id: total
    tool: python
    code: |
      rows = open("data.csv").read().split()[1:]
      open("report.txt", "w").write(f"sum={sum(map(int, rows))}\\n")
  - id: done
    kind: final
    input: {answer: "the report is in report.txt"}
    depends_on: [total]
outputs: [report.txt]
"""
LOGS = {"steps": [{"id": "talk", "tool": "python", "code":
                   "import time\nfor i in range(3):\n    print('line', i, flush=True)\n"
                   "    time.sleep(0.4)\n"}]}


@dataclass(frozen=True)
class Server:
    url: str
    key: str


@pytest.fixture(scope="module")
def server(pg_server_url: str, template_url: str) -> Iterator[Server]:
    home = Path(tempfile.mkdtemp(prefix="onebox-sdk-"))
    home.chmod(0o755)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "onebox_template"')
    db_url = psycopg.conninfo.make_conninfo(pg_server_url, dbname=name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ONEBOX_")},
           "ONEBOX_HOME": str(home / "home"), "DATABASE_URL": db_url,
           "ONEBOX_LOG_LEVEL": "ERROR", "ONEBOX_RUNTIME__POLL_S": "0.1"}
    proc = subprocess.Popen([ONEBOX, "up", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        key = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
        url = f"http://127.0.0.1:{port}"
        _wait_up(url, key)
        yield Server(url, key)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(home, ignore_errors=True)


def _wait_up(url: str, key: str) -> None:
    deadline = time.monotonic() + 60
    with Client(url, key) as client:
        while True:
            try:
                client.sessions.list()
                return
            except ServerUnreachable:
                assert time.monotonic() < deadline
                time.sleep(0.2)


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, server.key) as c:
        yield c


def test_env_variables_configure_the_client(server: Server,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEBOX_URL", server.url)
    monkeypatch.setenv("ONEBOX_API_KEY", server.key)
    with Client() as c:
        assert c.base_url == server.url
        assert isinstance(c.sessions.list(), list)


def test_submit_a_yaml_plan_with_a_file_then_answer_and_files(client: Client,
                                                              tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("n\n1\n2\n39\n")
    submitted = client.runs.submit(plan=PLAN, files=[data], idempotency_key="sdk-1")
    run = client.runs.wait(submitted.run_id, timeout_s=120)
    assert run.status == "SUCCEEDED", run.raw
    assert run.answer == "the report is in report.txt"
    assert client.runs.answer(run.id) == run.answer
    assert [f.path for f in client.runs.files(run.id)] == ["report.txt"]
    saved = client.runs.download(run.id, "report.txt", tmp_path / "out" / "report.txt")
    assert saved.read_text() == "sum=42\n"
    archive = client.runs.zip(run.id, tmp_path / "run.zip")
    assert zipfile.ZipFile(archive).read("files/report.txt") == b"sum=42\n"
    again = client.runs.submit(plan=PLAN, files=[data], idempotency_key="sdk-1")
    assert again.existing and again.run_id == submitted.run_id
    assert any(r["id"] == run.id for r in client.runs.list(status=["SUCCEEDED"]))


def test_events_stream_live_output_and_resume_after_a_seq(client: Client) -> None:
    run_id = client.runs.submit(plan=LOGS).run_id
    events = list(client.runs.events(run_id))
    kinds = [e.type for e in events]
    assert kinds[-1] == "run_succeeded", kinds
    printed = "".join(e.payload.get("text", "") for e in events if e.type == "step_output")
    assert "line 0" in printed and "line 2" in printed
    assert kinds.index("step_output") < kinds.index("step_succeeded")
    middle = events[len(events) // 2].seq
    resumed = list(client.runs.events(run_id, after=middle))
    assert [e.seq for e in resumed] == [e.seq for e in events if e.seq > middle]


class CuttingProxy:
    """A TCP proxy in front of the server that cuts the first event stream it carries in
    the middle of the response, after its first event id: a dropped connection, for real."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cuts = 0
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        self.sockets += [client, upstream]
        request = client.recv(65536)
        upstream.sendall(request)
        cut = b"/events/stream" in request and self.cuts == 0
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        seen = b""
        with client, upstream, contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if cut and b"id: " in seen + chunk:
                    client.sendall(chunk[: (seen + chunk).index(b"id: ") - len(seen) + 8])
                    self.cuts += 1
                    client.shutdown(socket.SHUT_RDWR)  # FIN now (the pump thread holds it)
                    upstream.shutdown(socket.SHUT_RDWR)
                    return
                seen += chunk
                client.sendall(chunk)

    @staticmethod
    def _pump(client: socket.socket, upstream: socket.socket) -> None:
        try:
            while chunk := client.recv(65536):
                upstream.sendall(chunk)
        except OSError:
            pass


def test_a_dropped_event_stream_resumes_with_no_gap_and_no_duplicate(client: Client,
                                                                     server: Server) -> None:
    run_id = client.runs.submit(plan=LOGS).run_id
    direct = [e.seq for e in client.runs.events(run_id)]
    proxy = CuttingProxy(int(server.url.rsplit(":", 1)[1]))
    try:
        with Client(f"http://127.0.0.1:{proxy.port}", server.key) as through:
            resumed = [e.seq for e in through.runs.events(run_id)]
    finally:
        proxy.close()
    assert proxy.cuts == 1
    assert resumed == direct


def test_session_exec_keeps_state_and_streams(client: Client) -> None:
    session = client.sessions.create()
    try:
        first = session.exec("x = 41\nprint('set', flush=True)")
        assert first.ok and first.stdout == "set\n"
        chunks: list[str] = []
        results: list[CellOutput] = []
        second = session.exec("print('x is', x)\nx + 1", on_stdout=chunks.append,
                              on_result=results.append)
        assert "".join(chunks) == "x is 41\n"
        assert [r.text for r in results if r.is_main_result] == ["42"]
        assert second.execution_count == (first.execution_count or 0) + 1
        failed = session.exec("1 / 0")
        assert failed.exit_code == 1 and failed.error is not None
        assert failed.error.name == "ZeroDivisionError"
        once = session.exec("print('x' in dir())", stateless=True)
        assert once.stdout == "False\n" and once.exit_code == 0
        bash = session.exec("echo $((2 + 3)); exit 7", language="bash")
        assert (bash.stdout, bash.exit_code) == ("5\n", 7)
        session.upload("in/data.txt", "hello")
        assert "in/data.txt" in [f["path"] for f in session.files()]
        assert session.read("in/data.txt") == b"hello"
    finally:
        session.delete()


def test_errors_map_to_the_error_tree(client: Client, server: Server) -> None:
    with pytest.raises(NotFound) as missing:
        client.runs.get(str(uuid.uuid4()))
    assert missing.value.field == "run_id"
    with pytest.raises(NotFound) as gone:
        client.sessions.get("api-0123456789abcdef").exec("1")
    assert gone.value.field == "session_id"
    with pytest.raises(PlanError) as bad:
        client.runs.submit(plan={"steps": [{"id": "a", "tool": "bash", "code": "true",
                                            "depends_on": ["ghost"]}]})
    assert bad.value.field and "depends_on" in bad.value.field
    with pytest.raises(ValidationError) as both:
        client.runs.submit(plan={"steps": []}, task="x")
    assert both.value.field == "plan"
    with Client(server.url, "obx_not-a-key") as stranger, pytest.raises(Unauthorized):
        stranger.runs.list()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with Client(dead, server.key) as nowhere, pytest.raises(ServerUnreachable) as down:
        nowhere.runs.list()
    assert dead in down.value.message


def test_memory_and_knowledge(client: Client) -> None:
    made = client.memory.remember("sdk", "the deploy window is Tuesday 14:00")
    recalled = client.memory.recall("sdk", "when can we deploy?")
    assert recalled and recalled[0].id == made.id
    client.memory.forget(made.id)
    assert client.memory.recall("sdk", "when can we deploy?") == []
    client.knowledge.add("leases.md", "Workers renew their lease every few seconds.",
                         collection="sdk")
    hits = client.knowledge.search("how are leases renewed?", collections=["sdk"])
    assert hits and hits[0].source == "leases.md" and hits[0].collection == "sdk"


def test_async_client_mirrors_the_client(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.key) as ob:
            run_id = (await ob.runs.submit(plan=LOGS)).run_id
            kinds = [e.type async for e in ob.runs.events(run_id)]
            assert "step_output" in kinds and kinds[-1] == "run_succeeded"
            assert (await ob.runs.wait(run_id)).status == "SUCCEEDED"
            session = await ob.sessions.create()
            await session.exec("y = 2")
            seen: list[str] = []
            result = await session.exec("print(y * 21)", on_stdout=seen.append)
            assert result.stdout == "42\n" and seen == ["42\n"]
            await session.delete()
            with pytest.raises(NotFound):
                await ob.runs.get(str(uuid.uuid4()))

    asyncio.run(main())
