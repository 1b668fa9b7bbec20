"""Environments: named, versioned package layers a session, a plan step or a profile runs with.

``build`` runs ``python3 -m pip install --target`` INSIDE a sandbox session (an sdist runs
code; never on the host), whose only network is the egress proxy allowing the package index
(``environments.allow_domains``). pip's output is copied out of the hostile workspace
(:mod:`onebox.runtime.environments.layers`), hashed into ``<sandbox dir>/envs/<sha256>`` and made
read-only; the sandbox binds it read-only at ``/opt/onebox/env`` with ``PYTHONPATH`` set.
Each build of a name is a new version; the same package list (and python) reuses a READY
layer without building. ``data`` (numpy, pandas, matplotlib) is predefined.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from onebox.agent.context import SandboxFacts
from onebox.config import Settings
from onebox.errors import Conflict, NotFound, SandboxError, ValidationError
from onebox.runtime.environments import layers as env_layers
from onebox.sandbox.base import (
    EnvironmentLayer,
    ExecRequest,
    ExecResult,
    Limits,
    NetworkPolicy,
    SandboxBackend,
)
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("environments")
LogSink = Callable[[str], None]
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
PREDEFINED: dict[str, tuple[str, ...]] = {"data": ("numpy", "pandas", "matplotlib")}
TARGET = "layer"  # pip's --target, relative to the build workspace
LOG_TAIL_CHARS = 4000
PUBLIC = ("name", "version", "packages", "python_version", "status", "sha256", "size_bytes",
          "file_count", "build_ms", "log_tail", "error", "created_at", "finished_at")


def layers_dir(settings: Settings) -> Path:
    """Where layers live: beside the workspaces, reachable by session users when run as root."""
    return settings.sandbox_dir / "envs"


def check_name(name: str) -> str:
    if not re.match(NAME, name or ""):
        raise ValidationError(f"environment name {name!r}: use letters, digits, '.', '_' and "
                              "'-' (at most 64, starting with a letter or digit)", field="name")
    return name


def check_build(name: str, packages: list[str] | None) -> tuple[str, ...]:
    """The packages a build of ``name`` installs, or the ValidationError it would fail with:
    checked before a build is accepted, so a background build cannot fail on its input."""
    check_name(name)
    return env_layers.check_requirements(list(packages or PREDEFINED.get(name, ())))


def public(row: Row) -> Row:
    return {key: row.get(key) for key in PUBLIC}


async def build(db: Database, backend: SandboxBackend, settings: Settings, tenant_id: str,
                name: str, packages: list[str] | None = None,
                on_log: LogSink | None = None) -> Row:
    """Build (or reuse) the environment ``name`` from ``packages`` (default: a predefined
    environment's list); returns its row, with ``reused`` true when no build ran."""
    wanted = check_build(name, packages)
    python = await asyncio.to_thread(env_layers.python_version)
    spec = env_layers.spec_sha256(wanted, python)
    log = on_log or (lambda _line: None)
    reused = await _reuse(db, settings, tenant_id, name, spec)
    if reused is not None:
        log(f"reusing the layer of {reused['name']} v{reused['version']} (same packages)")
        return {**public(reused), "reused": True}
    row = await _start(db, tenant_id, name, wanted, python, spec)
    log(f"building {name} v{row['version']}: pip install {' '.join(wanted)}")
    done = await _build_layer(db, backend, settings, row, log)
    return {**public(done), "reused": False}


async def _reuse(db: Database, settings: Settings, tenant_id: str, name: str,
                 spec: str) -> Row | None:
    found = await db.fetchone(Q["ready_with_spec"], {"spec_sha256": spec, "tenant_id": tenant_id,
                                                     "name": name})
    if found is None or not (layers_dir(settings) / found["sha256"]).is_dir():
        return None
    latest = await db.fetchone(Q["latest_of_name"], {"tenant_id": tenant_id, "name": name})
    if latest is not None and latest["status"] == "READY" and latest["spec_sha256"] == spec:
        return latest
    row = await _start(db, tenant_id, name, tuple(found["packages"]),
                       found["python_version"], spec)
    return await _finish(db, row, status="READY", sha256=found["sha256"],
                         size_bytes=found["size_bytes"], file_count=found["file_count"],
                         build_ms=0.0, log_tail=f"reused layer {found['sha256']}", error=None)


async def _start(db: Database, tenant_id: str, name: str, packages: tuple[str, ...],
                 python: str, spec: str) -> Row:
    row = await db.fetchone(Q["start_build"], {
        "tenant_id": tenant_id, "name": name, "packages": Jsonb(list(packages)),
        "python_version": python, "spec_sha256": spec})
    assert row is not None  # INSERT ... RETURNING
    return row


async def _finish(db: Database, row: Row, **values: Any) -> Row:
    done = await db.fetchone(Q["finish_build"], {
        "tenant_id": row["tenant_id"], "name": row["name"], "version": row["version"], **values})
    assert done is not None
    return done


async def _build_layer(db: Database, backend: SandboxBackend, settings: Settings, row: Row,
                       log: LogSink) -> Row:
    """Run pip in a throwaway sandbox session, keep its output as a layer, record the row."""
    session_id = f"env-{uuid.uuid4().hex[:16]}"
    started = time.monotonic()
    try:
        result = await backend.execute(
            _with_index(_pip_request(session_id, settings, row, log), settings))
        tail = (result.stdout + result.stderr)[-LOG_TAIL_CHARS:]
        if not result.ok:
            why = await asyncio.to_thread(_why, result, settings)
            return await _failed(db, row, started, tail, why)
        log("copying the layer out of the build sandbox")
        copied, path = await asyncio.to_thread(
            _keep, backend.workspace(session_id) / TARGET, settings)
    except Exception as exc:
        await _failed(db, row, started, "", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        await backend.cleanup(session_id)
    for skipped in copied.skipped:
        log(f"not copied (not a regular file): {skipped}")
    log(f"layer {copied.sha256[:12]}: {copied.file_count} files, {copied.size_bytes} bytes")
    return await _finish(db, row, status="READY", sha256=copied.sha256,
                         size_bytes=copied.size_bytes, file_count=copied.file_count,
                         build_ms=_ms_since(started), log_tail=tail, error=None)


def _pip_request(session_id: str, settings: Settings, row: Row, log: LogSink) -> ExecRequest:
    cfg = settings.environments
    argv = ("/usr/bin/python3", "-m", "pip", "install", "--no-cache-dir",
            "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
            "--target", f"/workspace/{TARGET}", "--", *row["packages"])
    return ExecRequest(
        session_id=session_id, argv=argv, env={"PIP_NO_WARN_SCRIPT_LOCATION": "1", "PYTHONDONTWRITEBYTECODE": ""},
        limits=Limits(timeout_s=cfg.build_timeout_s, memory_mb=cfg.build_memory_mb,
                      disk_mb=cfg.build_disk_mb, max_output_bytes=4 << 20),
        network=NetworkPolicy(allow_domains=tuple(cfg.allow_domains)),
        on_output=_line_sink(log), host_python_packages=True)  # pip is the host's


def _line_sink(log: LogSink) -> Callable[[str, bytes], None]:
    """The sandbox's live output as whole lines for ``log``."""
    pending = {"stdout": b"", "stderr": b""}

    def feed(stream: str, chunk: bytes) -> None:
        *lines, pending[stream] = (pending[stream] + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                log(line.decode("utf-8", "replace").rstrip())
    return feed


def _with_index(request: ExecRequest, settings: Settings) -> ExecRequest:
    """The pip request pointed at ``environments.index_url`` (a mirror), its host let
    through the egress proxy (and trusted by pip when it is plain HTTP)."""
    url = settings.environments.index_url
    if url is None:
        return request
    index = urllib.parse.urlsplit(url)
    host = index.netloc.rpartition("@")[2]
    env = {**request.env, "PIP_INDEX_URL": url}
    if index.scheme == "http":  # pip ignores a plain-HTTP index it is not told to trust
        env["PIP_TRUSTED_HOST"] = host
    network = dataclasses.replace(
        request.network, allow_domains=(*request.network.allow_domains, host))
    return dataclasses.replace(request, env=env, network=network)


def _why(result: ExecResult, settings: Settings) -> str:
    """Why pip failed; when the egress proxy refused hosts, the settings that let them
    through, in the form their variables take (this resolves names: call it off the loop)."""
    if result.timed_out:
        return "pip did not finish within environments.build_timeout_s"
    if result.blocked_network:
        hosts = sorted({b.host for b in result.blocked_network})
        return (f"pip exited with {result.exit_code}; blocked hosts: {', '.join(hosts)}. "
                f"{_egress_fix(hosts, settings)}")
    return result.error or f"pip exited with {result.exit_code}"


def _egress_fix(hosts: list[str], settings: Settings) -> str:
    allow = settings.sandbox.egress_allow_private
    private = [a for a in env_layers.private_index_addresses(hosts) if a not in allow]
    index = ("ONEBOX_ENVIRONMENTS__INDEX_URL=http://HOST[:PORT]/simple/ points pip at a "
             "package mirror (its host is allowed through the proxy)")
    if private:
        wanted = json.dumps([*allow, *private])
        return (f"{', '.join(hosts)} is at {', '.join(private)} here, not a public address "
                f"(a mirror on this network?): the egress proxy reaches it only "
                f"when listed in ONEBOX_SANDBOX__EGRESS_ALLOW_PRIVATE='{wanted}' (a JSON list "
                f"of addresses or networks), set where the build runs. {index}")
    domains = json.dumps(settings.environments.allow_domains)
    return (f"pip may reach only ONEBOX_ENVIRONMENTS__ALLOW_DOMAINS='{domains}' (a JSON list "
            f"of hosts) through the egress proxy; {index}; a mirror at an address that is "
            "not public also needs ONEBOX_SANDBOX__EGRESS_ALLOW_PRIVATE='[\"10.0.0.5\"]' (its "
            "addresses, a JSON list)")


def _keep(source: Path, settings: Settings) -> tuple[env_layers.Copied, Path]:
    root = layers_dir(settings)
    staging = env_layers.staging_dir(root)
    try:
        copied = env_layers.copy_layer(source, staging, settings.environments.build_disk_mb << 20,
                                       settings.environments.max_files)
    except BaseException:
        env_layers.remove_tree(staging)
        raise
    return copied, env_layers.install_layer(staging, root, copied.sha256)


async def _failed(db: Database, row: Row, started: float, tail: str, error: str) -> Row:
    return await _finish(db, row, status="FAILED", sha256=None, size_bytes=None,
                         file_count=None, build_ms=_ms_since(started), log_tail=tail,
                         error=error)


def _ms_since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


async def list_environments(db: Database, tenant_id: str) -> list[Row]:
    """The latest version of each of the tenant's environments."""
    return [public(r) for r in await db.fetch(Q["list_environments"], {"tenant_id": tenant_id})]


async def show(db: Database, tenant_id: str, name: str) -> Row:
    """The latest version of ``name`` with every version's summary."""
    versions = await db.fetch(Q["versions_of"], {"tenant_id": tenant_id, "name": name})
    if not versions:
        raise NotFound(f"environment {name!r} does not exist; `onebox env build {name}` builds "
                       "it", field="name")
    return {**public(versions[-1]), "versions": [
        {k: v[k] for k in ("version", "status", "sha256", "created_at")} for v in versions]}


async def remove(db: Database, settings: Settings, tenant_id: str, name: str) -> Row:
    """Delete every version of ``name``; refused while a profile names it. Sessions that use
    it fail on their next call with an error saying to rebuild it. A layer no row names any
    more is deleted from disk."""
    users = await db.fetch(Q["profiles_using"], {"tenant_id": tenant_id, "name": name})
    if users:
        names = ", ".join(u["name"] for u in users)
        raise Conflict(f"environment {name!r} is used by profile(s) {names}: change their "
                       "environment first", field="name")
    deleted = await db.fetch(Q["delete_environment"], {"tenant_id": tenant_id, "name": name})
    if not deleted:
        raise NotFound(f"environment {name!r} does not exist", field="name")
    for sha in {d["sha256"] for d in deleted if d["sha256"]}:
        if await db.fetchone(Q["layer_in_use"], {"sha256": sha}) is None:
            await asyncio.to_thread(env_layers.remove_tree, layers_dir(settings) / sha)
    return {"name": name, "versions_deleted": len(deleted)}


async def layer(db: Database, settings: Settings, tenant_id: str, name: str,
                version: int | None = None, field: str = "environment") -> EnvironmentLayer:
    """The READY layer to run with (the latest, or one version); a ValidationError naming
    ``field`` and the fix when it is unknown, not built, failed or gone."""
    query = "latest_ready" if version is None else "one_version"
    row = await db.fetchone(Q[query], {"tenant_id": tenant_id, "name": name, "version": version})
    fix = f"`onebox env build {name}` (or POST /v1/environments) builds it"
    if row is None or row["status"] != "READY":
        raise ValidationError(f"environment {name!r} is not built: {fix}", field=field)
    path = layers_dir(settings) / row["sha256"]
    if not path.is_dir():
        raise ValidationError(f"environment {name!r} has lost its layer on disk: {fix}",
                              field=field)
    return EnvironmentLayer(name=row["name"], version=row["version"], path=path,
                            sha256=row["sha256"], packages=tuple(row["packages"]))


async def set_session_environment(db: Database, session_id: str,
                                  chosen: EnvironmentLayer | None) -> None:
    await db.fetch(Q["set_session_environment"], {
        "id": session_id, "name": chosen.name if chosen else None,
        "version": chosen.version if chosen else None})


async def session_layer(db: Database, backend: SandboxBackend,
                        session_id: str) -> EnvironmentLayer | None:
    """The layer a session was created with (None: none), for every call of the session."""
    row = await db.fetchone(Q["session_environment"], {"id": session_id})
    if row is None or row["environment"] is None:
        return None
    return await layer(db, backend_settings(backend), row["tenant_id"], row["environment"],
                       row["environment_version"])


def backend_settings(backend: SandboxBackend) -> Settings:
    """The settings a sandbox backend was made with (where its layers live)."""
    settings = getattr(backend, "settings", None)
    if not isinstance(settings, Settings):
        raise SandboxError(f"sandbox backend {backend.name!r} does not run environments")
    return settings


async def step_layer(db: Database, settings: Settings, run_id: Any,
                     name: str) -> EnvironmentLayer:
    """A plan step's environment, looked up among its run's tenant's environments."""
    row = await db.fetchone(Q["run_tenant"], {"run_id": run_id})
    tenant_id = row["tenant_id"] if row is not None else "default"
    return await layer(db, settings, tenant_id, name, field="environment")


def layer_json(chosen: EnvironmentLayer | None) -> Row | None:
    if chosen is None:
        return None
    return {"name": chosen.name, "version": chosen.version, "sha256": chosen.sha256,
            "packages": list(chosen.packages)}


async def with_run_packages(db: Database, settings: Settings, run_id: Any,
                            facts: SandboxFacts | None) -> SandboxFacts | None:
    """The sandbox facts the agent's code prompt states, with the packages of the run's
    profile's environment first (they are importable in every step of the run)."""
    row = await db.fetchone(Q["run_environment"], {"run_id": run_id})
    if facts is None or row is None or not row["environment"]:
        return facts
    try:
        chosen = await layer(db, settings, row["tenant_id"], row["environment"])
    except ValidationError:  # not built: the step itself fails saying so
        return facts
    return dataclasses.replace(facts, packages=(*chosen.packages, *facts.packages))
