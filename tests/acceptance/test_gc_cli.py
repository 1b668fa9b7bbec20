"""`onebox gc` as a user runs it: --dry-run counts and removes nothing, --json prints the
report, the run goes with its steps, bad input is a clear error naming the option."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ONEBOX = str(Path(sys.executable).with_name("onebox"))
PLAN = "name: gc-probe\nsteps:\n  - id: write\n    tool: python\n    code: |\n" \
       "      open('out.txt', 'w').write('{text}')\n      print('{text}')\n"


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-gc-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=_env(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL")
           and not k.startswith("ONEBOX_RETENTION__")}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160"}


def onebox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONEBOX, *args], env=_env(home), capture_output=True, text=True,
                          timeout=180, cwd=home)


def run_ids(home: Path) -> list[str]:
    listed = onebox(home, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    return [r["id"] for r in json.loads(listed.stdout)["runs"]]


def test_gc_dry_run_then_json_removes_the_oldest_run(home: Path) -> None:
    for text in ("first", "second"):
        (home / "plan.yaml").write_text(PLAN.format(text=text))
        ran = onebox(home, "run", "plan.yaml")
        assert ran.returncode == 0, ran.stderr
    newest, oldest = run_ids(home)

    dry = onebox(home, "gc", "--keep", "1", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    preview = json.loads(dry.stdout)
    assert preview["dry_run"] is True and preview["run_ids"] == [oldest]
    assert preview["runs"] == 1 and preview["attempts"] == 1 and preview["events"] > 0
    assert preview["objects_deleted"] >= 2  # its own blob and manifest
    assert run_ids(home) == [newest, oldest]

    done = onebox(home, "gc", "--keep", "1", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dry_run"] is False and report["run_ids"] == [oldest]
    assert {k: report[k] for k in ("runs", "attempts", "events", "sessions", "snapshots",
                                   "objects_deleted")} == {
        k: preview[k] for k in ("runs", "attempts", "events", "sessions", "snapshots",
                                "objects_deleted")}
    assert run_ids(home) == [newest]
    shown = onebox(home, "show", oldest)
    assert shown.returncode != 0 and "does not exist" in shown.stderr

    again = onebox(home, "gc", "--keep", "1")
    assert again.returncode == 0 and "removed 0 runs" in again.stdout


def test_gc_refuses_bad_input_naming_the_option(home: Path) -> None:
    bad = onebox(home, "gc", "--older-than", "30x")
    assert bad.returncode == 2 and "--older-than" in bad.stderr and "30d" in bad.stderr
    assert "Traceback" not in bad.stderr
    none = onebox(home, "gc", "--dry-run")
    assert none.returncode == 2 and "ONEBOX_RETENTION__MAX_AGE_DAYS" in none.stderr
