"""Placement independence, differentially: seeded random plans run (a) on one host with one
worker, (b) on three hosts, (c) on three hosts whose workers are SIGKILLed and restarted
and one of which is cut off (SIGSTOP) past its lease, and (d) on the network-namespace
cluster of tests/chaos/cluster.py (PostgreSQL over TCP, an S3 server, each host its own
namespace) whose workers are SIGKILLed and whose hosts lose their link past the lease;
every step's output hash, every run's status and its final head must be the same in all.

A *host* is its own home (its own sandbox root, workspaces and disk images) and a real
`onebox worker` process; in (b) and (c) the hosts share the database and one object store
(each home's ``objects`` is the same directory, as an S3 bucket would be), in (d) they
reach both over the network. A plan's steps write, append,
delete and rename files in parallel branches, list and hash what they see, join, and pass
approval gates (approved by the harness as soon as they wait).

    python tests/chaos/differential.py --seeds 200        # prints the counts
    python tests/chaos/differential.py --seed 17          # one seed, every mode
    python tests/chaos/differential.py --seeds 30 --modes one,netns

Used by tests/chaos/test_differential.py with a few seeds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database

BIN = Path(sys.executable).parent
MODES = ("one", "three", "chaos", "netns")
ENDED = {"SUCCEEDED", "FAILED", "DEAD", "CANCELLED"}
NAMES = ("a.txt", "b.txt", "c.txt", "d/e.txt", "d/f.txt", "g.txt")
LEASE_S = 2.0
CUTOFF_EVERY = 6
SHOW = "find . -type f | LC_ALL=C sort | while read -r f; do echo \"$f $(sha256sum < \"$f\" | cut -c1-12)\"; done"


# -- plans -------------------------------------------------------------------


def random_plan(seed: int) -> dict[str, Any]:
    """A plan of 4-9 steps: code steps on random files, approvals, a join of every end."""
    rng = random.Random(seed)
    steps: list[dict[str, Any]] = []
    for i in range(rng.randint(4, 9)):
        earlier = [s["id"] for s in steps]
        deps = sorted(rng.sample(earlier, k=min(len(earlier), rng.choice([0, 1, 1, 2]))))
        if earlier and rng.random() < 0.15:
            steps.append({"id": f"gate{i}", "kind": "approval", "depends_on": deps or earlier[-1:],
                          "input": {"prompt": "go on?"}})
            continue
        ops = [_op(rng, f"{seed}-{i}-{k}") for k in range(rng.randint(1, 4))]
        if rng.random() < 0.3:
            ops.insert(rng.randrange(len(ops) + 1), f"sleep 0.{rng.randint(1, 4)}")
        steps.append({"id": f"s{i}", "tool": "bash", "depends_on": deps,
                      "code": "mkdir -p d; " + "; ".join(ops) + "; " + SHOW})
    used = {d for s in steps for d in s["depends_on"]}
    ends = [s["id"] for s in steps if s["id"] not in used]
    steps.append({"id": "join", "tool": "bash", "depends_on": ends, "code": SHOW})
    return {"name": f"differential-{seed}", "steps": steps}


def _op(rng: random.Random, token: str) -> str:
    name = rng.choice(NAMES)
    kind = rng.choice(["write", "write", "append", "delete", "rename"])
    if kind == "write":
        return f"echo {token} > {name}"
    if kind == "append":
        return f"echo {token} >> {name}"
    if kind == "delete":
        return f"rm -f {name}"
    target = rng.choice([n for n in NAMES if n != name])
    return f"if [ -e {name} ]; then mv {name} {target}; fi"


# -- hosts -------------------------------------------------------------------


@dataclass
class Host:
    home: Path
    name: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.home.parent / f"{self.name}.log", "ab")  # noqa: SIM115 - the child's
        self.proc = subprocess.Popen(
            [str(BIN / "onebox"), "worker", "--concurrency", "2", "--drain-s", "2",
             "--name", f"{self.name}-{self.starts}"], env=self.env, stdout=log, stderr=log)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def runtime_env() -> dict[str, str]:
    """What every worker of the harness runs with: short leases, quick polls."""
    return {"ONEBOX_RUNTIME__LEASE_S": str(LEASE_S), "ONEBOX_RUNTIME__HEARTBEAT_S": "0.4",
            "ONEBOX_RUNTIME__POLL_S": "0.1", "ONEBOX_LOG_LEVEL": "WARNING"}


@dataclass
class NetHost:
    """A host of the network-namespace cluster, driven like :class:`Host`: SIGSTOP and
    SIGCONT cut its link and bring it back (its worker runs on, unable to reach the database
    or the object store), other signals go to its worker."""

    host: Any  # cluster.Host
    name: str
    starts: int = 0

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.host.processes.get("worker")

    def start(self) -> None:
        self.starts += 1
        self.host.start("worker", "worker", "--concurrency", "2", "--drain-s", "2",
                        "--name", f"{self.name}-{self.starts}")

    def signal(self, sig: int) -> None:
        if sig == signal.SIGSTOP:
            self.host.cut_off()
        elif sig == signal.SIGCONT:
            self.host.reconnect()
        elif self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        self.host.reconnect()
        self.host.stop("worker", timeout_s=30)


@contextlib.contextmanager
def mode_hosts(mode: str, base: Path, database_url: str) -> Iterator[list[Any]]:
    """The hosts a mode runs its workers on."""
    if mode != "netns":
        yield make_hosts(base / mode, base / "objects", 1 if mode == "one" else 3,
                         database_url)
        return
    from cluster import cluster

    (base / mode).mkdir(parents=True, exist_ok=True)
    with cluster(base / mode, database_url, settings=runtime_env()) as made:
        yield [NetHost(h, f"net{n}") for n, h in enumerate(made.hosts)]


def make_hosts(base: Path, shared: Path, count: int, database_url: str) -> list[Host]:
    """``count`` homes under ``base`` sharing ``shared`` as their object store (one per
    database: the database records which objects are stored)."""
    shared.mkdir(parents=True, exist_ok=True)
    hosts = []
    for n in range(count):
        home = base / f"host-{n}" / "home"
        home.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (home / "objects").symlink_to(shared)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ONEBOX_")}
        env.update({"ONEBOX_HOME": str(home), "DATABASE_URL": database_url, **runtime_env()})
        hosts.append(Host(home, f"host{n}", env))
    return hosts


# -- one mode ----------------------------------------------------------------


@dataclass
class Outcome:
    status: str
    outputs: dict[str, str | None]
    head: str | None
    run_id: uuid.UUID
    error: str | None = None
    stdout: dict[str, str] = field(default_factory=dict)


@dataclass
class Chaos:
    """SIGKILL a random worker every few seconds (it restarts at once) and, after the first
    kill and every ``CUTOFF_EVERY`` kills, cut one off with SIGSTOP for longer than its lease
    (it wakes up afterwards, as a host whose link comes back)."""

    rng: random.Random
    kills: int = 0
    cutoffs: int = 0
    _next_kill: float = field(default=0.0)
    _stopped: Any = None
    _resume_at: float = 0.0

    def tick(self, hosts: list[Any], now: float) -> None:
        if self._stopped is not None and now >= self._resume_at:
            self._stopped.signal(signal.SIGCONT)
            self._stopped = None
        if not self._next_kill:
            self._next_kill = now + self.rng.uniform(0.5, 1.0)
        if now < self._next_kill:
            return
        self._next_kill = now + self.rng.uniform(1.0, 2.5)
        host = self.rng.choice([h for h in hosts if h is not self._stopped])
        if self._stopped is None and self.kills >= 1 and self.kills % CUTOFF_EVERY == 1:
            host.signal(signal.SIGSTOP)
            self._stopped, self._resume_at = host, now + LEASE_S * 2 + 1
            self.cutoffs += 1
            return
        host.signal(signal.SIGKILL)
        if host.proc is not None:
            host.proc.wait(10)
        self.kills += 1
        host.start()


async def run_mode(db: Database, settings: Settings, database_url: str, plans: dict[int, Any],
                   mode: str, base: Path, *, timeout_s: float = 900.0) -> tuple[dict[int, Outcome], Chaos | None]:
    """Submit every plan, serve them with the mode's hosts until all end, and read back what
    each run computed. The network cluster keeps its objects in its own S3 bucket, so it
    gets a database of its own (a database records which objects its store holds: the same
    files stored by the other modes would be taken as stored in the bucket too)."""
    if mode == "netns":
        async with own_database(database_url, base / "netns-settings") as (own, own_url):
            return await _run_mode(own, settings, own_url, plans, mode, base, timeout_s)
    return await _run_mode(db, settings, database_url, plans, mode, base, timeout_s)


@contextlib.asynccontextmanager
async def own_database(database_url: str, home: Path) -> Any:
    """A new database on the same server, migrated, open: (Database, its url)."""
    import psycopg

    from onebox.config import load_settings

    name = f"differential_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    url = psycopg.conninfo.make_conninfo(
        **{**{k: str(v) for k, v in info.items() if v}, "dbname": name})
    db = await Database.open(load_settings(home=home, database_url=url))
    try:
        yield db, url
    finally:
        await db.close()
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _run_mode(db: Database, settings: Settings, database_url: str,
                    plans: dict[int, Any], mode: str, base: Path,
                    timeout_s: float) -> tuple[dict[int, Outcome], Chaos | None]:
    runs = {seed: (await submit_plan(db, settings, parse_plan(plan))).run_id
            for seed, plan in plans.items()}
    chaos = Chaos(random.Random(len(plans))) if mode in ("chaos", "netns") else None
    with mode_hosts(mode, base, database_url) as hosts:
        for host in hosts:
            host.start()
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                pending = await _pending(db, settings, list(runs.values()))
                if not pending or time.monotonic() > deadline:
                    break
                if chaos is not None:
                    chaos.tick(hosts, time.monotonic())
                await asyncio.sleep(0.1)
        finally:
            for host in hosts:
                host.stop()
    return {seed: await _outcome(db, run_id) for seed, run_id in runs.items()}, chaos


async def _pending(db: Database, settings: Settings, run_ids: list[uuid.UUID]) -> int:
    rows = await db.fetch("SELECT id, status FROM onebox.runs WHERE id = ANY(%s)", (run_ids,))
    waiting = await db.fetch(
        "SELECT run_id, step_id FROM onebox.task_execution WHERE run_id = ANY(%s) "
        "AND status = 'PENDING' AND waiting_for = 'approval'", (run_ids,))
    for w in waiting:
        with contextlib.suppress(Exception):
            await runs_api.approve_step(db, settings, w["run_id"], w["step_id"], approve=True,
                                        by="differential")
    return sum(1 for r in rows if r["status"] not in ENDED)


async def _outcome(db: Database, run_id: uuid.UUID) -> Outcome:
    run = await runs_api.get_run(db, run_id)
    latest: dict[str, dict[str, Any]] = {}
    for step in await runs_api.run_steps(db, run_id):
        if step["step_id"] not in latest or step["attempt"] > latest[step["step_id"]]["attempt"]:
            latest[step["step_id"]] = step
    async with db.connection() as conn:
        head = await snapshot_rows.latest_commit(conn, f"run-{run_id}")
    return Outcome(run["status"], {k: s.get("output_hash") for k, s in sorted(latest.items())},
                   None if head is None else str(head["sha256"]).strip(), run_id, run["error"],
                   {k: str(s.get("stdout") or "") + str(s.get("error") or "")
                    for k, s in latest.items()})


# -- comparing ---------------------------------------------------------------


def differences(results: dict[str, dict[int, Outcome]]) -> dict[int, str]:
    """Seed -> what differs between the modes (or why a run did not succeed)."""
    out: dict[int, str] = {}
    reference_mode = next(iter(results))  # the reference: the first mode run
    reference = results[reference_mode]
    for seed, ref in reference.items():
        problems = []
        for mode, outcomes in results.items():
            got = outcomes[seed]
            if got.status != "SUCCEEDED":
                problems.append(f"{mode}: run {got.run_id} is {got.status} ({got.error})")
            if mode == reference_mode:
                continue
            steps = [k for k in ref.outputs if ref.outputs[k] != got.outputs.get(k)]
            if steps:
                first = steps[0]
                problems.append(f"{mode}: step outputs differ: {', '.join(steps)} "
                                f"(run {got.run_id} vs {ref.run_id}; {first} printed "
                                f"{got.stdout.get(first)!r}, not {ref.stdout.get(first)!r})")
            if got.head != ref.head:
                problems.append(f"{mode}: final head differs (run {got.run_id} vs {ref.run_id})")
        if problems:
            out[seed] = "; ".join(problems)
    return out


def replay_hint(seed: int) -> str:
    return f"python tests/chaos/differential.py --seed {seed}"


# -- as a script ---------------------------------------------------------------


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-differential-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        _remove(path)


def _remove(path: Path) -> None:
    """Unmount what the workers left (workspace images, run tmpfs) and remove the tree;
    ONEBOX_DIFFERENTIAL_KEEP=1 keeps it to look at."""
    if os.environ.get("ONEBOX_DIFFERENTIAL_KEEP"):
        print(f"kept {path}")
        return
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(str(path) + "/")), reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    subprocess.run(["rm", "-rf", str(path)], capture_output=True)


async def _main(seeds: list[int], modes: tuple[str, ...] = MODES) -> int:
    from onebox.config import load_settings
    from onebox.store.db import migrate
    from onebox.store.embedded import start_embedded

    with _scratch() as base:
        server, url = start_embedded(base / "pg")
        try:
            settings = load_settings(home=base / "submitter", database_url=url)
            import psycopg
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await migrate(conn)
            db = await Database.open(settings)
            plans = {seed: random_plan(seed) for seed in seeds}
            results: dict[str, dict[int, Outcome]] = {}
            started = time.monotonic()
            for mode in modes:
                results[mode], chaos = await run_mode(db, settings, url, plans, mode, base)
                said = f" ({chaos.kills} workers killed, {chaos.cutoffs} cut off)" if chaos else ""
                print(f"{mode}: {len(plans)} runs in {time.monotonic() - started:.0f} s{said}",
                      flush=True)
            await db.close()
        finally:
            server.cleanup()
    bad = differences(results)
    steps = sum(len(o.outputs) for o in results[modes[0]].values())
    print(f"seeds: {len(seeds)}, steps per mode: {steps}, identical: {len(seeds) - len(bad)}, "
          f"different: {len(bad)}")
    for seed, why in sorted(bad.items()):
        print(f"seed {seed}: {why}\n  replay: {replay_hint(seed)}")
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 0..N-1")
    parser.add_argument("--seed", type=int, action="append", help="run only this seed")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, the first is the reference (of {', '.join(MODES)})")
    args = parser.parse_args()
    seeds = args.seed if args.seed else list(range(args.seeds))
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or not set(modes) <= set(MODES):
        parser.error(f"--modes: choose among {', '.join(MODES)}")
    sys.exit(asyncio.run(_main(seeds, modes)))


if __name__ == "__main__":
    main()
