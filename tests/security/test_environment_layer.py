"""Environment layers: read-only inside the sandbox, copied out of a hostile build workspace
without following symlinks, and built only from plain requirement strings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from onebox.config import Settings
from onebox.errors import ValidationError
from onebox.runtime.environments import layers as env_layers
from onebox.runtime.environments import service as envs
from onebox.sandbox.base import EnvironmentLayer, ExecRequest, SandboxBackend
from onebox.store.db import Database

HOST_SECRET = "host-secret-7d1e"


def _layer(source: Path, settings: Settings) -> EnvironmentLayer:
    """A layer installed where builds put them (reachable by the session users)."""
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    staging = env_layers.staging_dir(envs.layers_dir(settings))
    copied = env_layers.copy_layer(source, staging, 1 << 20, 100)
    path = env_layers.install_layer(staging, envs.layers_dir(settings), copied.sha256)
    return EnvironmentLayer("t", 1, path, copied.sha256, ("pkg",))


async def test_a_layer_cannot_be_written_from_inside(
        backend: SandboxBackend, settings: Settings, tmp_path: Path) -> None:
    layer = _layer(tmp_path / "src", settings)
    probe = (
        "import pkg, os\n"
        "print('value', pkg.VALUE)\n"
        "mounts = [l.split() for l in open('/proc/self/mountinfo')]\n"
        "print('mount', [m[5] for m in mounts if m[4] == '/opt/onebox/env'])\n"
        "for attempt in (lambda: open('/opt/onebox/env/pkg/__init__.py', 'a'),\n"
        "                lambda: open('/opt/onebox/env/new.py', 'w'),\n"
        "                lambda: os.chmod('/opt/onebox/env/pkg/__init__.py', 0o666),\n"
        "                lambda: os.rename('/opt/onebox/env/pkg', '/opt/onebox/env/x')):\n"
        "    try:\n"
        "        attempt(); print('WROTE')\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n")
    result = await backend.execute(ExecRequest(session_id="envsec-1", code=probe,
                                               environment=layer))
    assert result.ok, result.stderr
    assert "value 42" in result.stdout
    assert "WROTE" not in result.stdout and result.stdout.count("refused") == 4
    mount_line = next(line for line in result.stdout.splitlines() if line.startswith("mount"))
    assert "'ro," in mount_line or "'ro'" in mount_line  # the bind itself is read-only
    assert (layer.path / "pkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert not (layer.path / "new.py").exists()


def test_a_planted_symlink_does_not_copy_a_host_file(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text(HOST_SECRET)
    source = tmp_path / "workspace" / "layer"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "ok.py").write_text("x = 1\n")
    (source / "pkg" / "leak.py").symlink_to(secret)
    (source / "linked_dir").symlink_to(tmp_path)
    os.mkfifo(source / "pipe")
    copied = env_layers.copy_layer(source, tmp_path / "staged", 1 << 20, 100)
    staged = tmp_path / "staged"
    names = sorted(str(p.relative_to(staged)) for p in staged.rglob("*"))
    assert names == ["pkg", "pkg/ok.py"]
    assert all(HOST_SECRET not in p.read_text() for p in staged.rglob("*.py"))
    assert sorted(copied.skipped) == ["linked_dir (symlink)", "pipe (other)",
                                      "pkg/leak.py (symlink)"]


def test_a_layer_over_its_byte_bound_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "layer"
    source.mkdir()
    (source / "big.bin").write_bytes(b"x" * 5000)
    with pytest.raises(Exception, match="larger than"):
        env_layers.copy_layer(source, tmp_path / "staged", 4096, 100)


@pytest.mark.parametrize("bad", [
    "--index-url=http://evil.example/simple", "-r /etc/passwd", "-r", "--extra-index-url",
    "six @ http://evil.example/six.whl", "file:///etc/passwd", "./local-dir", "/etc/passwd",
    "six; os_name == 'posix'", "six --index-url http://evil", "six\n--pre", "-e .",
    "git+https://evil.example/x.git", "",
])
def test_requirement_strings_that_are_not_plain_requirements_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="not a package requirement|at least one") as caught:
        env_layers.check_requirements(["six", bad] if bad else [])
    assert caught.value.field in ("packages[1]", "packages")


def test_plain_requirements_are_accepted_and_normalized() -> None:
    assert env_layers.check_requirements(["pandas", "requests[socks]>=2,<3", "six==1.17.0",
                                          "pandas"]) == ("pandas", "requests[socks]>=2,<3",
                                                         "six==1.17.0")


async def test_a_bad_requirement_is_refused_before_any_sandbox_runs(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    with pytest.raises(ValidationError):
        await envs.build(db, backend, settings, "default", "evil", ["-r /etc/passwd"])
    assert await db.fetch("SELECT * FROM onebox.environments") == []
