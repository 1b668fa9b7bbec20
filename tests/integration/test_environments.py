"""Environments: a real pip build from PyPI inside the sandbox, its layer used by a session
and a plan step, read-only inside; same list reuses; bad package -> FAILED with pip's tail."""

from __future__ import annotations

import base64

import pytest

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.errors import Conflict, ValidationError
from onebox.runtime.e2b import sandboxes as e2b_sandboxes
from onebox.runtime.environments import service as envs
from onebox.runtime.environments.layers import private_index_addresses
from onebox.runtime.models.profiles import (
    delete_profile,
    parse_profile,
    save_profile,
    with_profile_defaults,
)
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services import session_service
from onebox.runtime.services.service import Runtime
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.registry import get_backend
from onebox.store.db import Database


@pytest.fixture(autouse=True)
def index_reachable(settings: Settings) -> None:
    """Where the package index resolves to a non-public address (a mirror on this network),
    the egress proxy must be told it may reach it, as an operator would."""
    settings.sandbox.egress_allow_private = private_index_addresses(
        settings.environments.allow_domains)


IMPORT_SIX = "import six, sys; print(six.__version__, six.__file__)"


async def test_a_built_environment_is_imported_in_a_session_and_reused(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    lines: list[str] = []
    row = await envs.build(db, backend, settings, "default", "tiny", ["six"], lines.append)
    assert row["status"] == "READY", row["log_tail"]
    assert row["version"] == 1 and not row["reused"] and row["file_count"] > 0
    assert any("six" in line for line in lines)  # progress lines while building
    layer_dir = envs.layers_dir(settings) / row["sha256"]
    assert layer_dir.is_dir() and not layer_dir.stat().st_mode & 0o222

    session = await session_service.create_session(db, backend, "default",
                                                    environment="tiny")
    result = await session_service.execute(
        db, backend, session["id"], code=IMPORT_SIX, language="python", timeout_s=30,
        memory_mb=None, allow_domains=[], stdin=None)
    assert result.ok, result.stderr
    assert "/opt/onebox/env/six.py" in result.stdout

    again = await envs.build(db, backend, settings, "default", "tiny", ["six"])
    assert again["reused"] and again["version"] == 1 and again["sha256"] == row["sha256"]
    other = await envs.build(db, backend, settings, "default", "other", ["six"])
    assert other["reused"] and other["sha256"] == row["sha256"] and other["build_ms"] == 0


async def test_a_plan_step_runs_with_its_environment(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    assert (await envs.build(db, backend, settings, "default", "tiny", ["six"]))["status"] \
        == "READY"
    plan = {"name": "six", "steps": [
        {"id": "use", "tool": "python", "environment": "tiny",
         "code": IMPORT_SIX + "\nopen('/opt/onebox/env/six.py', 'a')"}]}
    run = await Runtime(settings, db, backend).run_plan(parse_plan(plan))
    steps = await runs_api.run_steps(db, run["id"])
    out = steps[0]["stdout"] + steps[0]["stderr"]
    assert "/opt/onebox/env/six.py" in out  # imported from the layer
    assert "Read-only file system" in out or "Permission denied" in out  # not writable
    assert run["status"] in ("FAILED", "DEAD")


async def test_a_bad_package_fails_with_pips_error(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    row = await envs.build(db, backend, settings, "default", "bad",
                           ["onebox-no-such-package-4f1c9a"])
    assert row["status"] == "FAILED"
    assert "No matching distribution" in row["log_tail"] or "ERROR" in row["log_tail"]
    assert "pip exited" in row["error"]
    with pytest.raises(ValidationError, match="onebox env build bad") as caught:
        await envs.layer(db, settings, "default", "bad")
    assert caught.value.field == "environment"


async def test_an_unknown_environment_is_a_clear_error(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    with pytest.raises(ValidationError, match="onebox env build nope") as caught:
        await session_service.create_session(db, backend, "default", environment="nope")
    assert caught.value.field == "environment"
    plan = {"name": "x", "steps": [{"id": "a", "tool": "python", "environment": "nope", "code": "print(1)"}]}
    run = await Runtime(settings, db, backend).run_plan(parse_plan(plan))
    steps = await runs_api.run_steps(db, run["id"])
    assert "onebox env build nope" in (steps[0]["error"] or "")


async def test_a_profiles_environment_reaches_its_steps_and_blocks_rm(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    assert (await envs.build(db, backend, settings, "default", "tiny", ["six"]))["status"] \
        == "READY"
    profile = parse_profile({"name": "p", "model": "m", "environment": "tiny"})
    async with db.connection() as conn:
        await save_profile(conn, settings, "default", profile)
    step = parse_plan({"steps": [{"id": "a", "tool": "python", "code": "1"}]}).steps[0]
    assert with_profile_defaults(step, profile.model_dump()).environment == "tiny"
    with pytest.raises(Conflict, match="profile"):
        await envs.remove(db, settings, "default", "tiny")
    async with db.connection() as conn:
        await delete_profile(conn, "default", "p")
    layer_dir = envs.layers_dir(settings) / (await envs.show(db, "default", "tiny"))["sha256"]
    assert (await envs.remove(db, settings, "default", "tiny"))["versions_deleted"] == 1
    assert not layer_dir.exists()
    with pytest.raises(ValidationError, match="onebox env build tiny"):
        await envs.layer(db, settings, "default", "tiny")


async def test_an_e2b_template_names_a_built_environment(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    assert (await envs.build(db, backend, settings, "default", "tiny", ["six"]))["status"] \
        == "READY"
    for template, imports in (("tiny", True), ("code-interpreter-v1", False)):
        sandbox = await e2b_sandboxes.create(db, backend, "default", template=template,
                                             metadata=None, timeout_s=60)
        result = await session_service.execute(
            db, backend, sandbox.sandbox_id, code=IMPORT_SIX, language="python", timeout_s=30,
            memory_mb=None, allow_domains=[], stdin=None)
        if imports:
            assert result.ok, result.stderr
            assert "/opt/onebox/env/six.py" in result.stdout, template
        else:  # no layer: the sandbox's python has only its standard library
            assert not result.ok and "No module named 'six'" in result.stderr, template


async def test_a_matplotlib_figure_comes_back_as_a_png_result(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    """The interpreter's rich output for the case users meet first: a plot, in a session
    with an environment that has matplotlib (built from PyPI like `data`)."""
    built = await envs.build(db, backend, settings, "default", "plots", ["matplotlib"])
    assert built["status"] == "READY", built["log_tail"]
    session = await session_service.create_session(db, backend, "default", environment="plots")
    cell = await session_service.run_cell(
        db, backend, session["id"], timeout_s=60,
        code="import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\n"
             "plt.show()")
    assert cell.ok, (cell.error, cell.stderr)
    pngs = [base64.b64decode(r.data["image/png"]) for r in cell.results if "image/png" in r.data]
    assert len(pngs) == 1 and pngs[0].startswith(b"\x89PNG\r\n\x1a\n") and len(pngs[0]) > 1000
    after = await session_service.run_cell(db, backend, session["id"],
                                           code="len(plt.get_fignums())")
    assert [r.data for r in after.results] == [{"text/plain": "0"}]  # shown once, then closed


async def test_an_index_at_a_private_address_is_refused_naming_the_settings_that_let_it_through(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    """A package mirror on a private (here loopback) address: the build is refused by the
    egress proxy, and the error says which setting lets it through, in its exact form."""
    settings.environments.index_url = "http://127.0.0.1:9/simple/"  # nothing listens either
    settings.sandbox.egress_allow_private = []
    row = await envs.build(db, backend, settings, "default", "mirror", ["six"])
    assert row["status"] == "FAILED", row
    error = row["error"]
    assert "blocked hosts: 127.0.0.1" in error, error
    assert "ONEBOX_SANDBOX__EGRESS_ALLOW_PRIVATE='[\"127.0.0.1\"]'" in error, error
    assert "ONEBOX_ENVIRONMENTS__INDEX_URL" in error, error
    settings.sandbox.egress_allow_private = ["127.0.0.1"]  # as the error says, restarted
    restarted = get_backend(settings)
    try:
        again = await envs.build(db, restarted, settings, "default", "mirror", ["six"])
    finally:
        await restarted.close()
    assert again["status"] == "FAILED" and "blocked hosts" not in again["error"], again
    assert "127.0.0.1" in again["log_tail"]  # pip got past the proxy (nothing listens)
