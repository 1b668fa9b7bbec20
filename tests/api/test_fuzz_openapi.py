"""A bounded schemathesis run against `onebox serve` (a subprocess, as users run it): whatever
the fuzzer sends, the server answers with a 4xx {code, message, field}, never a 5xx or a trace."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from onebox.api import create_app
from onebox.config import load_settings

ONEBOX = str(Path(sys.executable).with_name("onebox"))
schema = schemathesis.openapi.from_dict(create_app(load_settings()).openapi()).exclude(
    path_regex=r"/events/stream$")  # an endless stream by design; covered in test_runs_api
schema.config.phases.coverage.enabled = False  # bounded: random fuzzing only (~1 min in all)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(pg_server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, str]]:
    name = f"t_fuzz_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "onebox_template"')
    info = psycopg.conninfo.conninfo_to_dict(pg_server_url)
    info["dbname"] = name
    home = tmp_path_factory.mktemp("fuzz-home")
    env = {**os.environ, "ONEBOX_HOME": str(home), "DATABASE_URL": psycopg.conninfo.make_conninfo(
        **{k: v for k, v in info.items() if v is not None}), "ONEBOX_LOG_LEVEL": "ERROR"}
    env.pop("OPENAI_BASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    made = subprocess.run([ONEBOX, "keys", "create", "--tenant", "fuzz", "--json"], env=env,
                          capture_output=True, text=True, check=True)
    key = json.loads(made.stdout)["key"]
    port = _free_port()
    proc = subprocess.Popen([ONEBOX, "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        yield url, key
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
        assert "Traceback" not in stderr, stderr[-3000:]
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@schema.parametrize()
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_input_makes_a_server_error(case: schemathesis.Case, server: tuple[str, str]) -> None:
    url, key = server
    response = case.call(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    content_type = (response.headers.get("content-type") or [""])[0]
    body = response.json() if content_type.startswith("application/json") else None
    if response.status_code >= 400:
        assert isinstance(body, dict) and set(body) == {"code", "message", "field"}, response.text
        assert "Traceback" not in body["message"]
    documented_unavailable = response.status_code == 503 and body is not None \
        and body.get("code") == "llm_not_configured"
    assert response.status_code < 500 or documented_unavailable, response.text[:500]
