"""A simulated cluster on one machine: three hosts as network namespaces joined by a bridge.

Each host has its own home (its own sandbox root, workspaces, images), and runs
``onebox serve`` and ``onebox worker`` as separate processes inside its namespace. The
machine's own namespace plays the network around them: one PostgreSQL reached over TCP
(a relay to the test server's socket), an S3-compatible object store over HTTP (moto's
server) and a plain round-robin TCP balancer in front of the three API servers.

Run as a script it is one of those network parts:

    python cluster.py relay HOST:PORT unix:/path/to/socket     # TCP -> a unix socket
    python cluster.py balance HOST:PORT HOST1:PORT1 HOST2:PORT2 ...   # round robin
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
API_PORT = 8420


def ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, timeout_s: float = 60, netns: str | None = None) -> None:
    """Until something accepts on host:port (from inside ``netns`` if given)."""
    deadline = time.monotonic() + timeout_s
    probe = [sys.executable, "-c", f"import socket; socket.create_connection(('{host}', {port}), 1)"]
    while time.monotonic() < deadline:
        argv = ["ip", "netns", "exec", netns, *probe] if netns else probe
        if subprocess.run(argv, capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port}")


def descendants(pids: list[int]) -> set[int]:
    """Every live process below these (by parent pid), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Host:
    name: str
    netns: str
    address: str
    home: Path
    veth: str
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{API_PORT}"

    def start(self, role: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.home / f"{role}.log", "ab")  # noqa: SIM115 - lives with the process
        argv = ["ip", "netns", "exec", self.netns, str(BIN / "onebox"), *args]
        proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.processes[role] = proc
        return proc

    def serve(self) -> None:
        """Start the API server and wait until it answers /readyz, as a balancer's health
        check would: its port listens (and queues requests) before its startup is done."""
        proc = self.start("serve", "serve", "--host", self.address, "--port", str(API_PORT))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name}'s server exited ({proc.returncode})\n{self.log()}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"{self.name}'s server never answered /readyz\n{self.log()}")

    def work(self, concurrency: int = 4) -> None:
        self.start("worker", "worker", "--concurrency", str(concurrency), "--drain-s", "5")

    def stop(self, role: str, sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
        proc = self.processes.pop(role, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def kill_all(self) -> set[int]:
        """SIGKILL this host's onebox processes (not their sandboxes: those must die with
        them); return every process that was below them."""
        roots = [p.pid for p in self.processes.values() if p.poll() is None]
        below = descendants(roots)
        for proc in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        for proc in self.processes.values():
            proc.wait(10)
        self.processes.clear()
        return below

    def cut_off(self) -> None:
        ip("link", "set", self.veth, "down")

    def reconnect(self) -> None:
        ip("link", "set", self.veth, "up")

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                         for p in sorted(self.home.glob("*.log")))


@dataclass
class Cluster:
    hosts: list[Host]
    gateway: str
    balancer: str
    services: list[subprocess.Popen[bytes]]

    def stop(self) -> None:
        for host in self.hosts:
            for role in list(host.processes):
                host.stop(role, timeout_s=20)


def _network(tag: str, n_hosts: int) -> tuple[str, str, list[tuple[str, str, str]]]:
    subnet = f"10.{77 + secrets.randbelow(100)}.{secrets.randbelow(250)}"
    bridge = f"obxbr{tag}"
    ip("link", "add", bridge, "type", "bridge")
    ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
    ip("link", "set", bridge, "up")
    hosts = []
    for n in range(1, n_hosts + 1):
        netns, veth, address = f"obx{tag}h{n}", f"obxv{tag}{n}", f"{subnet}.{10 + n}"
        ip("netns", "add", netns)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        ip("link", "set", veth, "master", bridge, "up")
        ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", netns, "link", "set", "eth0", "up")
        ip("-n", netns, "link", "set", "lo", "up")
        ip("-n", netns, "route", "add", "default", "via", f"{subnet}.1")
        hosts.append((netns, veth, address))
    return bridge, f"{subnet}.1", hosts


def _tear_down(bridge: str, hosts: list[tuple[str, str, str]]) -> None:
    for netns, _, _ in hosts:
        ip("netns", "del", netns, check=False)
    ip("link", "del", bridge, check=False)


def _script(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


@contextlib.contextmanager
def cluster(tmp: Path, database_url: str, n_hosts: int = 3,
            settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """Hosts up (network only: start their processes with ``serve()``/``work()``), with
    PostgreSQL, S3 and the balancer on the gateway address. Everything goes at the end."""
    import psycopg

    tag = secrets.token_hex(2)
    bridge, gateway, nets = _network(tag, n_hosts)
    services: list[subprocess.Popen[bytes]] = []
    try:
        info = psycopg.conninfo.conninfo_to_dict(database_url)
        pg_port = free_port(gateway)
        services.append(_script("relay", f"{gateway}:{pg_port}",
                                f"unix:{info['host']}/.s.PGSQL.{info.get('port') or 5432}"))
        s3_port = free_port(gateway)
        services.append(subprocess.Popen(
            [str(BIN / "moto_server"), "-H", gateway, "-p", str(s3_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        lb_port = free_port(gateway)
        services.append(_script("balance", f"{gateway}:{lb_port}",
                                *(f"{a}:{API_PORT}" for _, _, a in nets)))
        for port in (pg_port, s3_port, lb_port):
            wait_port(gateway, port)
        _bucket(f"http://{gateway}:{s3_port}")
        url = psycopg.conninfo.make_conninfo(**{**{k: v for k, v in info.items() if v},
                                                "host": gateway, "port": str(pg_port)})
        hosts = []
        for n, (netns, veth, address) in enumerate(nets, start=1):
            home = tmp / f"host-{n}"
            home.mkdir(parents=True)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                   "ONEBOX_HOME": str(home), "DATABASE_URL": url,
                   "ONEBOX_OBJECTS": "s3://onebox-cluster/snapshots",
                   "ONEBOX_OBJECTS_ENDPOINT_URL": f"http://{gateway}:{s3_port}",
                   "AWS_ACCESS_KEY_ID": "cluster", "AWS_SECRET_ACCESS_KEY": "cluster",
                   "AWS_DEFAULT_REGION": "us-east-1", "ONEBOX_LOG_LEVEL": "INFO",
                   "ONEBOX_API__ADVERTISE_URL": f"http://{address}:{API_PORT}",
                   **(settings or {})}
            hosts.append(Host(f"h{n}", netns, address, home, veth, env))
        made = Cluster(hosts, gateway, f"http://{gateway}:{lb_port}", services)
        try:
            yield made
        finally:
            made.stop()
    finally:
        for proc in services:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        _tear_down(bridge, nets)


def _bucket(endpoint: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="cluster",
                      aws_secret_access_key="cluster", region_name="us-east-1")
    s3.create_bucket(Bucket="onebox-cluster")


# --- the network parts, run as scripts -------------------------------------------------

async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _serve(listen: str, connect: object) -> None:
    host, port = listen.rsplit(":", 1)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await connect()  # type: ignore[operator]
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, host, int(port))
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    mode, listen, *targets = argv
    if mode == "relay":
        path = targets[0].removeprefix("unix:")
        asyncio.run(_serve(listen, lambda: asyncio.open_unix_connection(path)))
    elif mode == "balance":
        backends = itertools.cycle([t.rsplit(":", 1) for t in targets])

        async def next_backend() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            for _ in targets:  # a backend that is down is skipped, as a balancer would
                host, port = next(backends)
                with contextlib.suppress(OSError):
                    return await asyncio.wait_for(asyncio.open_connection(host, int(port)), 2)
            raise OSError("no backend answers")
        asyncio.run(_serve(listen, next_backend))


if __name__ == "__main__":
    main(sys.argv[1:])
