"""Benchmark environments; writes bench/results/environments.json.

    .venv/bin/python bench/environments.py [--runs 5]

Measures, on a fresh ONEBOX_HOME with the embedded PostgreSQL and the real sandbox:
- the build of the predefined ``data`` environment (numpy, pandas, matplotlib): pip inside
  a sandbox through the egress proxy, the copy out of the workspace, hashing; then the same
  build again (the same package list reuses the layer);
- a python step that does ``import pandas`` in the sandbox with that layer (a new session
  each time, so the sandbox start is included; and the same in a warm session), against
  the same import on the host from a ``pip install --target`` directory under /tmp.
Timings depend on machine load (recorded) and on the network to the package index.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from onebox.config import Settings, load_settings
from onebox.runtime.environments import service as envs
from onebox.runtime.environments.layers import private_index_addresses
from onebox.sandbox.base import ExecRequest, SandboxBackend
from onebox.store.db import Database

RESULTS = Path(__file__).parent / "results" / "environments.json"
IMPORT = "import time; t = time.perf_counter(); import pandas; " \
         "print((time.perf_counter() - t) * 1000)"


async def sandbox_import(backend: SandboxBackend, layer: Any, session_id: str) -> dict[str, float]:
    started = time.perf_counter()
    result = await backend.execute(ExecRequest(session_id=session_id, code=IMPORT,
                                               environment=layer))
    wall_ms = (time.perf_counter() - started) * 1000
    if not result.ok:
        raise RuntimeError(result.stderr)
    return {"wall_ms": round(wall_ms, 1), "import_ms": round(float(result.stdout), 1)}


def host_import(target: Path) -> dict[str, float]:
    started = time.perf_counter()
    out = subprocess.run(["/usr/bin/python3", "-c", IMPORT],
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    wall_ms = (time.perf_counter() - started) * 1000
    return {"wall_ms": round(wall_ms, 1), "import_ms": round(float(out.stdout), 1)}


def summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    return {key: {"median": round(statistics.median(s[key] for s in samples), 1),
                  "min": min(s[key] for s in samples), "max": max(s[key] for s in samples)}
            for key in samples[0]} | {"n": len(samples)}


def host_target(packages: tuple[str, ...], root: Path) -> tuple[Path, float]:
    """The same packages installed on the host with pip --target (a throwaway dir)."""
    target = root / "host-target"
    started = time.perf_counter()
    subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "--quiet", "--no-cache-dir",
                    "--no-compile", "--target", str(target), *packages], check=True)
    return target, round((time.perf_counter() - started) * 1000, 1)


async def measure(settings: Settings, runs: int, root: Path) -> dict[str, Any]:
    from onebox.sandbox.registry import get_backend

    db = await Database.open(settings)
    backend = get_backend(settings)
    load_before = os.getloadavg()[0]
    try:
        built = await envs.build(db, backend, settings, "default", "data")
        if built["status"] != "READY":
            raise RuntimeError(f"{built['error']}\n{built['log_tail']}")
        started = time.perf_counter()
        again = await envs.build(db, backend, settings, "default", "data")
        reuse_ms = round((time.perf_counter() - started) * 1000, 1)
        layer = await envs.layer(db, settings, "default", "data")
        cold = [await sandbox_import(backend, layer, f"bench-{uuid.uuid4().hex[:8]}")
                for _ in range(runs)]
        warm_id = "bench-warm"
        await sandbox_import(backend, layer, warm_id)
        warm = [await sandbox_import(backend, layer, warm_id) for _ in range(runs)]
        target, host_pip_ms = host_target(layer.packages, root)
        host_import(target)  # the first read fills the page cache, as the sandbox's did
        host = [host_import(target) for _ in range(runs)]
        return {
            "build": {"packages": built["packages"], "build_ms": built["build_ms"],
                      "size_bytes": built["size_bytes"], "file_count": built["file_count"],
                      "rebuild_same_list_ms": reuse_ms, "rebuild_reused": again["reused"],
                      "host_pip_target_ms": host_pip_ms},
            "import_pandas": {"sandbox_new_session": summary(cold),
                              "sandbox_same_session": summary(warm), "host": summary(host)},
            "sandbox": backend.name, "cpus": os.cpu_count(),
            "load_average_1m_before_after": [round(load_before, 2),
                                             round(os.getloadavg()[0], 2)],
        }
    finally:
        await backend.close()
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from onebox.store.embedded import stop_embedded

    root = Path(tempfile.mkdtemp(prefix="obx-bench-env-"))
    root.chmod(0o755)
    settings = load_settings(home=root / "home")
    # a package index that resolves to a private address here (a mirror) must be allowed
    settings.sandbox.egress_allow_private = private_index_addresses(
        settings.environments.allow_domains)
    try:
        results = asyncio.run(measure(settings, args.runs, root))
    finally:
        stop_embedded(settings.pg_dir)
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
