"""Limits above the operator's caps never reach the real sandbox, whoever asks (a plan, the agent, the API)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from sbx_helpers import sh
from test_e2b_tenancy import _serving

from onebox.api import create_app
from onebox.config import Settings
from onebox.errors import PolicyViolation
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.sandbox.linux import BwrapSandbox

pytestmark = pytest.mark.asyncio(loop_scope="session")

MARKER = "import pathlib; pathlib.Path('ran.txt').write_text('yes'); print('ran')"
OVER_CAPS = [
    ("memory_mb", 4_000_000), ("pids", 4_000_000), ("cpus", 64.0), ("disk_mb", 10_000_000),
    ("timeout_s", 30 * 24 * 3600.0), ("max_output_bytes", 1 << 40),
]


@pytest.mark.parametrize(("name", "value"), OVER_CAPS)
async def test_a_limit_above_its_cap_is_refused_before_anything_runs(
    linux: BwrapSandbox, name: str, value: float
) -> None:
    session = f"caps-{name.replace('_', '-')}"
    with pytest.raises(PolicyViolation) as caught:
        await sh(linux, MARKER, session=session, **{name: value})
    assert caught.value.field == f"limits.{name}"
    assert "operator cap" in caught.value.message and "ONEBOX_SANDBOX__MAX_" in caught.value.message
    probe = await sh(linux, "import os; print(os.path.exists('ran.txt'))", session=session)
    assert probe.stdout.strip() == "False", "the refused code must not have run"
    ran = await sh(linux, MARKER, session=session)  # the probe reaches its target within caps
    assert ran.stdout.strip() == "ran"
    again = await sh(linux, "import os; print(os.path.exists('ran.txt'))", session=session)
    assert again.stdout.strip() == "True"


async def test_a_limit_exactly_at_its_cap_runs(linux: BwrapSandbox) -> None:
    cap = linux.cfg.max_pids
    result = await sh(linux, "print('ok')", session="caps-at", pids=cap)
    assert result.exit_code == 0 and result.stdout.strip() == "ok"


@contextlib.asynccontextmanager
async def tenant_client(rt: Runtime, tenant: str = "acme") -> AsyncIterator[httpx.AsyncClient]:
    """A client with a fresh key of ``tenant`` to an API server over ``rt`` (app built now,
    so settings changed before the call apply)."""
    key = (await create_key(rt.db, tenant_id=tenant, name=f"{tenant}-bounds"))[0]
    async with _serving(create_app(rt.settings, runtime=rt)) as url, \
            httpx.AsyncClient(base_url=url, timeout=30,
                              headers={"Authorization": f"Bearer {key}"}) as client:
        yield client


async def test_a_background_environment_build_with_bad_packages_is_refused_before_202(
        rt: Runtime) -> None:
    """`wait: false` answers 202 only for a build that can start: a package list pip would
    refuse (an option, a URL, nothing) is a 422 naming the entry, not a 202 and a log line."""
    async with tenant_client(rt) as c:
        for packages, field in ((["--index-url=http://10.0.0.1/simple"], "packages[0]"),
                                (["six", "https://evil.example/x.whl"], "packages[1]"),
                                ([], "packages")):
            r = await c.post("/v1/environments",
                             json={"name": "bad", "packages": packages, "wait": False})
            assert r.status_code == 422, (packages, r.status_code, r.text)
            assert r.json()["field"] == field
        listed = (await c.get("/v1/environments")).json()["environments"]
    assert listed == [], "nothing was started for a refused build"


async def test_a_json_route_keeps_its_body_limit_whatever_the_content_type_says(
        rt: Runtime, settings: Settings) -> None:
    """The upload limit belongs to the upload routes: a 3 MiB body labelled multipart (with a
    length, or streamed without one) to POST /v1/runs is a 413 naming the JSON limit, while
    the same bytes to POST /v1/uploads are still read as an upload."""
    settings.api.max_request_bytes = 1 << 20
    body = b"--x\r\n" + b"a" * (3 << 20)
    multipart = {"Content-Type": "multipart/form-data; boundary=x"}

    async def streamed() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1 << 16):
            yield body[start:start + (1 << 16)]

    async with tenant_client(rt) as c:
        sized = await c.post("/v1/runs", content=body, headers=multipart)
        chunked = await c.post("/v1/runs", content=streamed(), headers=multipart)
        upload = await c.post("/v1/uploads", content=body, headers=multipart)
    for r in (sized, chunked):
        assert r.status_code == 413, r.text
        assert str(1 << 20) in r.text
    assert upload.status_code != 413, "the upload route keeps the upload limit"
