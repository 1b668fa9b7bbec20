"""The embedded PostgreSQL is reachable only through its Unix socket, and never runs as root.

Its auth is trust (anyone who reaches it is the superuser 'postgres'), so these two properties
are what keep other users and the network out; they must survive a change of engine."""

from __future__ import annotations

import os
import subprocess

import psycopg
import pytest


@pytest.fixture
def embedded_url(pg_server_url: str) -> str:
    if os.environ.get("ONEBOX_TEST_DATABASE_URL"):
        pytest.skip("the tests run against an external server")
    return pg_server_url


def test_no_tcp_listener(embedded_url: str) -> None:
    with psycopg.connect(embedded_url) as conn:
        listen = conn.execute("SHOW listen_addresses").fetchone()
    assert listen is not None and listen[0] == ""
    sockets = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    assert "postgres" not in sockets, sockets  # no postgres process listens on TCP at all


def test_server_runs_as_its_own_unprivileged_user(embedded_url: str) -> None:
    with psycopg.connect(embedded_url) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'").fetchone()
    assert row is not None
    uid = os.stat(f"/proc/{row[0]}").st_uid  # a server process, not our client
    if os.geteuid() == 0:
        assert uid != 0, "the embedded PostgreSQL runs as root"
    else:
        assert uid == os.geteuid()
