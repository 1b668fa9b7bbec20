"""The CLI as a user runs it: subprocesses, a fresh ONEBOX_HOME, the embedded database."""

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

ROOT = Path(__file__).resolve().parents[2]
ONEBOX = str(Path(sys.executable).with_name("onebox"))


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-cli-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=_env(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL")}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160"}


def onebox(home: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONEBOX, *args], env=_env(home), capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_quickstart_then_show_and_runs(home: Path) -> None:
    run = onebox(home, "run", "examples/quickstart.yaml")
    assert run.returncode == 0, run.stderr
    assert "SUCCEEDED" in run.stdout
    assert "Best region" in run.stdout
    assert "SELECT step_number" in run.stdout  # the SQL a user can paste into psql

    listed = onebox(home, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)["runs"]
    assert runs[0]["status"] == "SUCCEEDED" and runs[0]["name"] == "quickstart"

    shown = onebox(home, "show", runs[0]["id"], "--json")
    assert shown.returncode == 0, shown.stderr
    timeline = json.loads(shown.stdout)
    assert timeline["run"]["id"] == runs[0]["id"]
    assert [s["step_id"] for s in timeline["steps"]] == [
        "make_csv", "revenue_by_region", "units_stats", "report"]
    assert all(s["status"] == "SUCCESS" and s["memory_used_mb"] for s in timeline["steps"])

    text = onebox(home, "show", runs[0]["id"])
    assert text.returncode == 0 and "units_stats" in text.stdout


def test_failing_plan_exits_non_zero(home: Path, tmp_path: Path) -> None:
    plan = tmp_path / "fail.yaml"
    plan.write_text("steps:\n  - id: boom\n    tool: bash\n    code: exit 7\n    max_attempts: 1\n")
    run = onebox(home, "run", str(plan), "--json")
    assert run.returncode == 1
    result = json.loads(run.stdout)
    assert result["run"]["status"] == "DEAD"
    assert result["steps"][0]["exit_code"] == 7


def test_bad_plan_is_refused_before_anything_runs(home: Path, tmp_path: Path) -> None:
    before = json.loads(onebox(home, "runs", "--json").stdout)["runs"]
    plan = tmp_path / "bad.yaml"
    plan.write_text("steps:\n  - id: a\n    tool: bash\n    code: 'true'\n"
                    "  - id: b\n    tool: bash\n    code: 'true'\n    depends_on: [missing]\n")
    run = onebox(home, "run", str(plan))
    assert run.returncode == 2
    assert "steps[b].depends_on" in run.stderr and "'missing'" in run.stderr
    assert "Traceback" not in run.stderr
    after = json.loads(onebox(home, "runs", "--json").stdout)["runs"]
    assert len(after) == len(before)


def test_detach_submits_only(home: Path) -> None:
    run = onebox(home, "run", "examples/quickstart.yaml", "--detach", "--json")
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    shown = json.loads(onebox(home, "show", run_id, "--json").stdout)
    assert shown["run"]["status"] == "PENDING"
    cancel = onebox(home, "cancel", run_id)
    assert cancel.returncode == 0
    assert json.loads(onebox(home, "show", run_id, "--json").stdout)["run"]["status"] == "CANCELLED"


def test_unknown_run_and_bad_id(home: Path) -> None:
    missing = onebox(home, "show", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    bad = onebox(home, "show", "not-a-uuid")
    assert bad.returncode == 2 and "not a run id" in bad.stderr


def test_doctor_reports_every_check(home: Path) -> None:
    doctor = onebox(home, "doctor", "--json")
    report = json.loads(doctor.stdout)
    names = {c["name"] for c in report["checks"]}
    assert {"database", "bubblewrap", "user namespaces", "cgroups", "seccomp", "/dev/kvm",
            "embedding model", "LLM", "sandbox"} <= names
    db = next(c for c in report["checks"] if c["name"] == "database")
    assert db["ok"] and "pgvector" in db["detail"]
    assert all(c["ok"] or c["fix"] for c in report["checks"])


def test_fork_the_quickstart_at_its_report(home: Path) -> None:
    """`onebox fork RUN --at report --set report.code=...`: the three steps before it are
    kept, the report runs again on the workspace it had, with the new code."""
    run = onebox(home, "run", "examples/quickstart.yaml", "--json")
    assert run.returncode == 0, run.stderr
    parent = json.loads(run.stdout)["run"]["id"]
    forked = onebox(home, "fork", parent[:8], "--at", "report",
                    "--set", "report.code=import os; print(sorted(os.listdir('.')))")
    assert forked.returncode == 0, forked.stderr + forked.stdout
    assert "kept make_csv, revenue_by_region, units_stats" in forked.stdout
    assert "sales.csv" in forked.stdout and "report.md" not in forked.stdout.split("kept")[-1]
    shown = json.loads(onebox(home, "runs", "--json").stdout)["runs"][0]
    explained = onebox(home, "explain", shown["id"])
    assert f"forked from run {parent}" in explained.stdout
    assert f"forked from run {parent} at step" in onebox(home, "show", shown["id"]).stdout
    assert explained.stdout.count("not run again") == 3
    missing = onebox(home, "fork", parent, "--at", "nope")
    assert missing.returncode != 0 and "not in the fork's plan" in missing.stderr


def test_replay_a_whole_run_and_diff_it_with_its_fork(home: Path, tmp_path: Path) -> None:
    plan = tmp_path / "two.yaml"
    plan.write_text("steps:\n  - id: one\n    tool: bash\n    code: echo 1 > n.txt\n"
                    "  - id: two\n    tool: bash\n    code: cat n.txt\n    depends_on: [one]\n")
    parent = json.loads(onebox(home, "run", str(plan), "--json").stdout)["run"]["id"]
    replayed = onebox(home, "replay", parent)
    assert replayed.returncode == 0, replayed.stderr + replayed.stdout
    assert "2 of 2 replayed steps match; 0 model calls made" in replayed.stdout
    assert "match   one" in replayed.stdout and "recorded as run" in replayed.stdout
    again = json.loads(onebox(home, "runs", "--json").stdout)["runs"][0]
    assert again["name"].startswith("replay of") and again["status"] == "SUCCEEDED"
    missing = onebox(home, "thread", "fork", "00000000-0000-0000-0000-000000000000",
                     "--turn", "1")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    forked = onebox(home, "fork", parent, "--at", "one", "--set", "one.code=echo 2 > n.txt",
                    "--json")
    assert forked.returncode == 0, forked.stderr
    child = json.loads(forked.stdout)["run"]["id"]
    compared = onebox(home, "diff", parent, child)
    assert compared.returncode == 1, compared.stderr
    assert "differs one" in compared.stdout and "file n.txt" in compared.stdout
    assert "-1\n+2" in compared.stdout and "the first is one" in compared.stdout


PARALLEL_LOGS = """\
name: parallel logs
steps:
  - id: a
    tool: bash
    code: for i in 1 2 3 4; do echo "a line $i"; sleep 0.2; done
  - id: b
    tool: bash
    max_attempts: 2
    code: |
      for i in 1 2 3 4; do echo "b line $i"; sleep 0.2; done
      if [ ! -e tried ]; then touch tried; echo "b gives up" >&2; exit 1; fi
"""


def test_logs_groups_parallel_steps_by_attempt(home: Path, tmp_path: Path) -> None:
    plan = tmp_path / "parallel.yaml"
    plan.write_text(PARALLEL_LOGS)
    run = onebox(home, "run", str(plan), "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    run_id = json.loads(run.stdout)["run"]["id"]
    logs = onebox(home, "logs", run_id)
    assert logs.returncode == 0, logs.stderr
    a = "".join(f"a line {i}\n" for i in range(1, 5))
    b = "".join(f"b line {i}\n" for i in range(1, 5))
    assert logs.stdout == (f"==> step a, attempt 1 <==\n{a}==> step b, attempt 1 <==\n{b}"
                           f"==> step b, attempt 2 <==\n{b}"), logs.stdout
    assert logs.stderr == "b gives up\n"
    one = onebox(home, "logs", run_id, "b")  # one step: its attempts still labelled
    assert one.stdout == f"==> step b, attempt 1 <==\n{b}==> step b, attempt 2 <==\n{b}"
