"""`onebox exec -- 'print(1)'` wall time vs bare `python3 -c 'print(1)'`.

In-process (no server: the CLI opens the database and the sandbox itself), through a running
`onebox serve` (the CLI talks to it with the SDK) with a fresh session per call, and with one
reused session (its interpreter warm). Also the SDK's own warm `session.exec` round trip.
Writes bench/results/exec.json. Run: .venv/bin/python bench/exec.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ONEBOX = str(Path(sys.executable).with_name("onebox"))
KEEPER = """
import sys
from onebox.config import load_settings
from onebox.store.embedded import start_embedded
server, _ = start_embedded(load_settings().pg_dir)
print("up", flush=True)
sys.stdin.read()
"""


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0 or proc.stdout.strip() != "1":
        raise SystemExit(f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1),
            "max_ms": round(max(samples), 1), "n": len(samples)}


def series(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    timed(argv, env)  # warm-up: page cache, migrations, the first sandbox
    return [timed(argv, env) for _ in range(runs)]


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([ONEBOX, "serve", "--no-auth", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/healthz")
            return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit("onebox serve did not come up")


def sdk_round_trip(url: str, runs: int) -> dict[str, Any]:
    from onebox import Client

    with Client(url) as client:
        session = client.sessions.create()
        session.exec("x = 0")
        samples = []
        for _ in range(runs * 10):
            start = time.perf_counter()
            session.exec("x + 1")
            samples.append((time.perf_counter() - start) * 1000)
        session.delete()
    return summary(samples)


def bench(runs: int, home: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONEBOX_")}
    env.update(ONEBOX_HOME=str(home), ONEBOX_LOG_LEVEL="ERROR")
    python3 = os.path.realpath(sys.executable)
    out: dict[str, Any] = {"python3_c_print": summary(series([python3, "-c", "print(1)"], env,
                                                             runs))}
    exec_argv = [ONEBOX, "exec", "--", "print(1)"]
    out["exec_in_process"] = summary(series(exec_argv, env, runs))
    server, url = start_server(env)
    try:
        out["exec_via_server_fresh_session"] = summary(series(exec_argv, env, runs))
        keep = subprocess.run([ONEBOX, "exec", "--keep", "--json", "--", "1"], env=env,
                              capture_output=True, text=True, check=True)
        session = json.loads(keep.stdout)["session_id"]
        out["exec_via_server_reused_session"] = summary(series(
            [ONEBOX, "exec", "--session", session, "--", "print(1)"], env, runs))
        out["sdk_session_exec_warm_x_plus_1"] = sdk_round_trip(url, runs)
    finally:
        server.terminate()
        server.wait(timeout=60)
    base = out["python3_c_print"]["median_ms"]
    out["ratio_median"] = {k: round(v["median_ms"] / base, 1) for k, v in out.items()
                           if k.startswith("exec_")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "exec.json")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="obx-bench-exec-"))
    home.chmod(0o755)
    env = {**os.environ, "ONEBOX_HOME": str(home)}
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert keeper.stdout is not None and keeper.stdin is not None
    keeper.stdout.readline()
    try:
        result = {
            "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cpus",
            "load_avg_1m": round(os.getloadavg()[0], 1),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "exec": bench(args.runs, home),
        }
    finally:
        keeper.stdin.close()
        keeper.wait()
        subprocess.run([ONEBOX, "db", "stop"], env=env, capture_output=True)
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
