"""`onebox serve`, `onebox up` and `onebox keys` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from pydantic import SecretStr

from onebox.config import Settings

ONEBOX = str(Path(sys.executable).with_name("onebox"))


def _env(settings: Settings, db_url: str) -> dict[str, str]:
    return {**os.environ, "ONEBOX_HOME": str(settings.home), "DATABASE_URL": db_url,
            "ONEBOX_LOG_LEVEL": "ERROR"}


def test_serve_refuses_the_network_without_auth(settings: Settings) -> None:
    env = {**os.environ, "ONEBOX_HOME": str(settings.home)}
    for argv in (["serve", "--host", "0.0.0.0", "--no-auth"], ["up", "--host", "10.1.2.3", "--no-auth"]):
        proc = subprocess.run([ONEBOX, *argv], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "refusing to listen" in proc.stderr and "without authentication" in proc.stderr


def test_keys_create_list_revoke(settings: Settings, db_url: str) -> None:
    env = _env(settings, db_url)
    made = json.loads(subprocess.run([ONEBOX, "keys", "create", "--tenant", "acme", "--name", "ci",
                                      "--json"], env=env, capture_output=True, text=True,
                                     check=True).stdout)
    assert made["key"].startswith("obx_") and made["tenant_id"] == "acme"
    listed = json.loads(subprocess.run([ONEBOX, "keys", "list", "--json"], env=env,
                                       capture_output=True, text=True, check=True).stdout)
    assert [k["prefix"] for k in listed["keys"]] == [made["prefix"]]
    assert made["key"] not in json.dumps(listed)
    subprocess.run([ONEBOX, "keys", "revoke", made["prefix"]], env=env, check=True,
                   capture_output=True)
    again = subprocess.run([ONEBOX, "keys", "revoke", made["prefix"]], env=env,
                           capture_output=True, text=True)
    assert again.returncode == 1 and "no active API key" in again.stderr


def test_up_prints_url_and_first_key_and_runs_steps(settings: Settings, db_url: str) -> None:
    settings.database_url = SecretStr(db_url)
    env = {**_env(settings, db_url), "ONEBOX_API__PORT": "0"}
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([ONEBOX, "up", "--port", str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url_line = proc.stdout.readline().strip()
        key_line = proc.stdout.readline().strip()
        assert url_line == f"onebox is up: http://127.0.0.1:{port}/ui/"
        key = key_line.rsplit(" ", 1)[-1]
        assert key.startswith("obx_")
        assert (settings.home / "first-api-key").read_text().strip() == key
        assert oct((settings.home / "first-api-key").stat().st_mode & 0o777) == "0o600"
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.post(f"{base}/v1/runs", headers=headers, json={"plan": {"steps": [
                    {"id": "a", "tool": "bash", "code": "echo from-up"}]}})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
        run_id = r.json()["run_id"]
        while True:
            detail = httpx.get(f"{base}/v1/runs/{run_id}", headers=headers).json()
            if detail["run"]["status"] == "SUCCEEDED":
                break
            assert time.monotonic() < deadline, detail["run"]
            time.sleep(0.2)
        assert detail["steps"][0]["stdout"] == "from-up\n"
        assert "app.js" in httpx.get(f"{base}/ui/").text
        proc.terminate()  # SIGTERM: a graceful stop (the worker drains), exit 0
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
