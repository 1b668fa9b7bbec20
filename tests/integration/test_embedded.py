"""The embedded PostgreSQL: two processes starting it at once, and re-attaching after kill -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ATTACH = """
import asyncio, json, os, sys
from onebox.config import load_settings
from onebox.store.db import Database
async def main():
    db = await Database.open(load_settings())
    row = await db.fetchone("SELECT pg_postmaster_start_time()::text AS t, "
                            "(SELECT count(*) FROM onebox.schema_migrations) AS n")
    print(json.dumps({"started": row["t"], "migrations": row["n"], "pid": os.getpid()}), flush=True)
    if len(sys.argv) > 1:
        sys.stdin.read()   # hold the connection until killed
    await db.close()
asyncio.run(main())
"""


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-embedded-"))
    path.chmod(0o755)
    yield path
    from onebox.store.embedded import stop_embedded

    stop_embedded(path / "pg")
    shutil.rmtree(path, ignore_errors=True)


def attach(home: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL")}
    env["ONEBOX_HOME"] = str(home)
    return subprocess.Popen([sys.executable, "-c", ATTACH, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)  # type: ignore[call-overload]


def test_two_processes_start_a_new_server_at_once(home: Path) -> None:
    procs = [attach(home) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = [json.loads(o[0]) for o in outs]
    assert results[0]["started"] == results[1]["started"]  # one server, shared
    assert results[0]["migrations"] == results[1]["migrations"] > 0


def test_reattach_after_the_holder_is_killed(home: Path) -> None:
    holder = attach(home, "hold", stdin=subprocess.PIPE)
    assert holder.stdout is not None
    first = json.loads(holder.stdout.readline())
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    time.sleep(0.2)
    again = attach(home)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err[-2000:]
    assert json.loads(out)["started"] == first["started"]  # the same server, re-attached
    handles = json.loads((home / "pg" / ".handle_pids.json").read_text())
    assert first["pid"] not in handles  # the dead process was dropped from the handle list
