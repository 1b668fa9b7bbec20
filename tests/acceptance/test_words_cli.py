"""Issue 28's wording points through the CLI, as a user types them (every command a
subprocess, one home for the module): a mistyped step or command gets the name it is a typo
of, thread ids take prefixes, `onebox runs` and `onebox thread list` keep ids, names and
errors at 80 columns, a bad ONEBOX_* value is one line, and a profile naming unknown tools,
bad domains or a missing environment is refused with the fix."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ONEBOX = str(Path(sys.executable).with_name("onebox"))
GATED = ("name: gated-report\nsteps:\n  - id: review\n    kind: approval\n"
         "    input: {prompt: 'go?'}\n  - id: publish\n    tool: bash\n    code: echo hi\n"
         "    depends_on: [review]\n")


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-words-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=_env(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path, **extra: str) -> dict[str, str]:
    drop = ("DATABASE_URL", "ONEBOX_DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
            "ONEBOX_LLM__MODEL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160", **extra}


def onebox(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONEBOX, *args], env=_env(home, **env), capture_output=True,
                          text=True, timeout=180)


def test_a_mistyped_step_or_command_gets_the_name_it_is_a_typo_of(home: Path,
                                                                  tmp_path: Path) -> None:
    plan = tmp_path / "gated.yaml"
    plan.write_text(GATED)
    run = onebox(home, "run", str(plan), "--detach")
    assert run.returncode == 0, run.stderr
    run_id = run.stdout.strip()
    typo = onebox(home, "approve", run_id[:8], "reveiw")
    assert typo.returncode == 1
    assert "no such step 'reveiw'; did you mean 'review'?" in typo.stderr, typo.stderr
    assert "not waiting" not in typo.stderr
    real = onebox(home, "approve", run_id[:8], "publish")  # a step of the plan, not waiting
    assert real.returncode == 1 and "is not waiting for an approval" in real.stderr, real.stderr
    command = onebox(home, "rnu")
    assert command.returncode == 2
    assert "No such command 'rnu'. Did you mean 'run'?" in command.stderr, command.stderr
    far = onebox(home, "zzzzzz")
    assert "No such command 'zzzzzz'." in far.stderr and "Did you mean" not in far.stderr


def _make_threads(home: Path, *ids: str) -> None:
    """Threads with chosen ids, made through the same service the CLI and the API use
    (`onebox chat` would need a model)."""
    code = (
        "import asyncio, sys, uuid\n"
        "from onebox.config import load_settings\n"
        "from onebox.store.db import Database\n"
        "from onebox.runtime.threads import service\n"
        "async def main():\n"
        "    s = load_settings(); db = await Database.open(s)\n"
        "    async with db.transaction() as conn:\n"
        "        for i in sys.argv[1:]:\n"
        "            await service._one(conn, 'insert_thread', {'id': uuid.UUID(i),\n"
        "                'tenant_id': 'default', 'title': 'quarterly numbers ' + i[:4],\n"
        "                'profile': None, 'session_id': 'thread-' + i})\n"
        "    await db.close()\n"
        "asyncio.run(main())\n")
    done = subprocess.run([sys.executable, "-c", code, *ids], env=_env(home),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_thread_ids_take_prefixes_and_thread_list_keeps_them_at_80_columns(home: Path) -> None:
    alone, twin_a, twin_b = (str(uuid.UUID(p + uuid.uuid4().hex[4:]))
                             for p in ("3fa2", "b7c1", "b7c1"))
    _make_threads(home, alone, twin_a, twin_b)
    shown = onebox(home, "thread", "show", alone[:4], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["thread"]["id"] == alone
    ambiguous = onebox(home, "thread", "show", "b7c1")
    assert ambiguous.returncode == 2 and "ambiguous" in ambiguous.stderr, ambiguous.stderr
    assert twin_a in ambiguous.stderr and twin_b in ambiguous.stderr
    listed = onebox(home, "thread", "list", COLUMNS="80")
    assert listed.returncode == 0, listed.stderr
    for tid in (alone, twin_a, twin_b):
        shown_id = _id_column(listed.stdout, tid)
        assert onebox(home, "thread", "show", shown_id, "--json").returncode == 0, shown_id
    assert "quarterly" in listed.stdout
    assert all(len(line) <= 80 for line in listed.stdout.splitlines())


def test_runs_at_80_columns_keep_the_name_and_the_error(home: Path, tmp_path: Path) -> None:
    plan = tmp_path / "named.yaml"
    plan.write_text(GATED.replace("gated-report", "quarterly-revenue-report"))
    run_id = onebox(home, "run", str(plan), "--detach").stdout.strip()
    assert onebox(home, "cancel", run_id).returncode == 0
    runs = onebox(home, "runs", COLUMNS="80")
    assert runs.returncode == 0, runs.stderr
    assert all(len(line) <= 80 for line in runs.stdout.splitlines()), runs.stdout
    row = _id_column(runs.stdout, run_id)
    assert onebox(home, "show", row, "--json").returncode == 0
    assert "quarterly" in runs.stdout, runs.stdout  # the name
    assert "cancelled" in runs.stdout, runs.stdout  # the error ("cancelled by user"; the
    # status column says CANCELLED)


def _id_column(table: str, whole: str) -> str:
    """The id as the table prints it on the line that shows ``whole``: all of it, or a
    prefix of at least 8 characters."""
    for line in table.splitlines():
        first = next(iter(re.findall(r"[0-9a-f][0-9a-f-]{7,35}", line)), "")
        if first and whole.startswith(first):
            return first
    raise AssertionError(f"no row shows {whole} or a prefix of it:\n{table}")


def test_a_profile_naming_unknown_tools_bad_domains_or_no_environment_is_refused(
        home: Path) -> None:
    for flags, words in (
            (["--tool", "web_serch"], ["'web_serch'", "onebox tools list", "approval"]),
            (["--allow-domain", "*"], ["--allow-domain", "'*'", "*.example.com"]),
            (["--allow-domain", "a b"], ["--allow-domain", "'a b'"]),
            (["--environment", "nope"], ["'nope'", "onebox env build nope"])):
        done = onebox(home, "profile", "create", "p", "--model", "m", *flags)
        assert done.returncode == 2, (flags, done.stdout, done.stderr)
        flat = " ".join(done.stderr.split())
        for word in words:
            assert word in flat, (word, flat)
        assert "Traceback" not in done.stderr
    assert json.loads(onebox(home, "profile", "list", "--json").stdout)["profiles"] == []


@pytest.mark.parametrize(("variable", "value", "words"), [
    ("ONEBOX_SANDBOX__EGRESS_ALLOW_PRIVATE", "true", ["'true'", "expected a JSON list",
                                                      '["10.0.0.5"']),
    ("ONEBOX_SANDBOX__EGRESS_ALLOW_PRIVATE", "10.0.0.5", ["'10.0.0.5'", "not JSON",
                                                          "expected a JSON list"]),
    ("ONEBOX_SANDBOX__MEMORY_MB", "lots", ["'lots'", "expected a whole number"]),
    ("ONEBOX_SANDBOX__BACKEND", "docker", ["'docker'", "expected one of 'auto', 'linux'"]),
    ("ONEBOX_PROVIDERS", '[{"name": "lab"}]', ["[0].base_url", "expected a JSON list"]),
    ("ONEBOX_DATABASE_URL", "mysql://root:hunter2@db/x", ["expected a PostgreSQL URL",
                                                          "postgresql://"]),
])
def test_a_bad_setting_is_one_line_naming_the_variable_and_its_form(
        home: Path, variable: str, value: str, words: list[str]) -> None:
    done = onebox(home, "runs", **{variable: value})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {variable}: "), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "pydantic" not in done.stderr and "validation error" not in done.stderr
    assert "hunter2" not in done.stderr  # a URL may hold a password: never echoed
