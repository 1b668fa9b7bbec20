"""The API against hostile callers: DNS rebinding with --no-auth, a revoked key's open SSE
stream, other tenants' metrics, and snapshot downloads that must not be built in memory."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import Api

from onebox.api import create_app
from onebox.errors import ConfigError
from onebox.objects import get_object_store
from onebox.runtime.services.api_keys import create_key, revoke_key
from onebox.snapshots.archive import record_snapshot

PLAN = {"name": "queued", "steps": [{"id": "a", "tool": "bash", "code": "echo a"}]}


# -- --no-auth: loopback only, Host checked ------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:8420", "10.0.0.5",
                                  "127.0.0.1.nip.io", "localhost.evil.com", ""])
async def test_no_auth_refuses_foreign_host_headers(api_no_worker: Api, host: str) -> None:
    """A page on evil.example.com rebinding its name to 127.0.0.1 sends its own Host."""
    r = await _get_without_auth(api_no_worker, host)
    assert r.status_code == 421, r.text
    assert r.json()["code"] == "misdirected_request" and "localhost" in r.json()["message"]


@pytest.mark.parametrize("host", ["localhost", "localhost:8420", "127.0.0.1:8420", "[::1]:8420",
                                  "127.0.0.1", "[::1]", "LOCALHOST:1"])
async def test_no_auth_serves_loopback_host_headers(api_no_worker: Api, host: str) -> None:
    r = await _get_without_auth(api_no_worker, host)
    assert r.status_code == 200, r.text


async def _get_without_auth(api: Api, host: str) -> Any:
    """GET /v1/runs with --no-auth and the given Host header."""
    api.settings.api.auth = False
    try:
        async with api.client(None) as c:
            return await c.get("/v1/runs", headers={"Host": host})
    finally:
        api.settings.api.auth = True


async def test_with_auth_any_host_is_served(api_no_worker: Api) -> None:
    """Behind a proxy or a load balancer the Host is the public name; keys protect it."""
    async with api_no_worker.client() as c:
        assert (await c.get("/v1/runs", headers={"Host": "onebox.example.com"})).status_code == 200


def test_no_auth_app_refuses_a_non_loopback_address(tmp_path: Path) -> None:
    from onebox.config import load_settings

    settings = load_settings(home=tmp_path)
    settings.api.auth, settings.api.host = False, "0.0.0.0"
    with pytest.raises(ConfigError, match="127.0.0.1"):
        create_app(settings)


# -- SSE after revocation ---------------------------------------------------------------------


async def test_an_open_event_stream_ends_after_its_key_is_revoked(api_no_worker: Api) -> None:
    db = api_no_worker.rt.db
    api_no_worker.settings.api.key_recheck_s = 0.5
    key, row = await create_key(db, tenant_id="acme", name="sse watcher")
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=api_no_worker.url, headers=headers, timeout=60) as c:
        run_id = (await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        async with c.stream("GET", f"/v1/runs/{run_id}/events/stream") as response:
            lines = response.aiter_lines()
            assert await anext(lines) == "retry: 1000"
            await revoke_key(db, row["prefix"])
            rest = await asyncio.wait_for(_drain(lines), 30)
    assert "event: revoked" in rest, rest[-5:]


async def _drain(lines: object) -> list[str]:
    return [line async for line in lines]  # type: ignore[attr-defined]


# -- /metrics per tenant ----------------------------------------------------------------------


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    found = re.findall(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE)
    return [(labels, float(value)) for labels, value in found]


async def test_metrics_show_a_tenant_only_its_own_figures(api_no_worker: Api) -> None:
    async with api_no_worker.client("acme") as acme, api_no_worker.client("globex") as globex:
        for _ in range(3):
            assert (await acme.post("/v1/runs", json={"plan": PLAN})).status_code == 201
        mine = (await acme.get("/metrics")).text
        theirs = (await globex.get("/metrics")).text
    assert ('onebox_runs{status="PENDING",tenant="acme"} 3') in mine, mine
    assert "acme" not in theirs
    assert sum(value for _, value in _samples(theirs, "onebox_runs")) == 0, theirs
    [(labels, _)] = _samples(theirs, "onebox_queue_depth")  # an operator total, no tenant in it
    assert labels == ""


# -- snapshot downloads are streamed ------------------------------------------------------------


@contextmanager
def rss_peak() -> Iterator[list[int]]:
    """The process' highest resident set size (bytes), sampled every 5 ms while the block runs."""
    page = os.sysconf("SC_PAGE_SIZE")
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            with open("/proc/self/statm") as fh:
                peak[0] = max(peak[0], int(fh.read().split()[1]) * page)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


MB = 1 << 20


async def _big_snapshot(api: Api, c: httpx.AsyncClient, size_mb: int) -> tuple[str, str]:
    sid = (await c.post("/v1/sessions")).json()["id"]
    code = (f"import os\nfor i in range({size_mb // 8}):\n"
            "    open(f'blob{i}.bin', 'wb').write(os.urandom(8 << 20))\n")
    r = await c.post(f"/v1/sessions/{sid}/execute", json={"language": "python", "code": code,
                                                          "timeout_s": 120, "stateless": True})
    assert r.json()["exit_code"] == 0, r.text
    store = get_object_store(api.settings)
    try:
        snap = await record_snapshot(api.rt.db, store, api.rt.backend.workspace(sid),
                                     session_id=sid)
    finally:
        await store.close()
    return sid, str(snap.id)


async def test_a_large_snapshot_download_is_streamed(api_no_worker: Api, tmp_path: Path) -> None:
    """96 MB of incompressible files: the server process (this one) must not hold the archive.
    Built in memory it grew by >190 MB; streamed, by a few chunks."""
    async with api_no_worker.client() as c:
        c.timeout = httpx.Timeout(300)
        _, snap = await _big_snapshot(api_no_worker, c, 96)
        target = tmp_path / "snap.tar.gz"
        before = _rss()
        with rss_peak() as peak, target.open("wb") as out:
            async with c.stream("GET", f"/v1/snapshots/{snap}/download") as response:
                assert response.status_code == 200
                whole = "content-length" in response.headers
                async for chunk in response.aiter_raw():
                    out.write(chunk)
    grown_mb = (peak[0] - before) / MB
    assert grown_mb < 32, f"the server grew by {grown_mb:.0f} MB while sending the snapshot"
    assert not whole, "the archive was built before it was sent (it has a Content-Length)"
    with tarfile.open(target) as tar:
        names = sorted(m.name for m in tar.getmembers())
        member = tar.extractfile("blob0.bin")
        assert member is not None and len(member.read()) == 8 * MB
    assert names == sorted(f"blob{i}.bin" for i in range(12))


async def test_a_corrupted_object_never_arrives_as_a_complete_archive(api_no_worker: Api) -> None:
    """The archive is verified while it streams: a changed blob cuts the response short
    (an error status before the first byte would do too)."""
    async with api_no_worker.client() as c:
        sid = (await c.post("/v1/sessions")).json()["id"]
        await c.post(f"/v1/sessions/{sid}/execute",
                     json={"language": "bash", "code": "echo precious > a.txt"})
        store = get_object_store(api_no_worker.settings)
        snap = await record_snapshot(api_no_worker.rt.db, store,
                                     api_no_worker.rt.backend.workspace(sid), session_id=sid)
        await store.close()
        digest = hashlib.sha256(b"precious\n").hexdigest()
        blob = api_no_worker.settings.objects_dir / "blobs" / digest[:2] / digest
        blob.write_bytes(b"tampered\n")
        received, status = b"", 0
        with contextlib.suppress(httpx.HTTPError):
            async with c.stream("GET", f"/v1/snapshots/{snap.id}/download") as response:
                status = response.status_code
                async for chunk in response.aiter_raw():
                    received += chunk
                status = -1 if status == 200 else status  # a complete 200 answer
    assert status != -1, "a tampered snapshot was delivered as a complete archive"
    assert b"tampered" not in received
