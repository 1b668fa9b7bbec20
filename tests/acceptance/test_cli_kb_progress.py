"""`onebox kb add` progress without a TTY (plain lines with rate and ETA), --json stays pure,
and `onebox kb reembed` re-embeds memories too; the CLI runs as a subprocess, as a user runs it."""

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

from onebox.cli.kb import plain_line
from onebox.knowledge.ingest import IngestProgress

ONEBOX = str(Path(sys.executable).with_name("onebox"))


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-kbprog-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=_env(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL")}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160"}


def onebox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONEBOX, *args], env=_env(home), capture_output=True, text=True,
                          timeout=300)


def test_plain_line_shows_rate_and_eta() -> None:
    state = IngestProgress(files_total=4, files_done=1, chunks_total=40, chunks_embedded=10)
    assert plain_line(state, 5.0) == ("kb add: 1/4 files, 10/40 chunks embedded, "
                                      "2.0 chunks/s, ETA 15 s")


def test_kb_add_without_tty_then_json_then_reembed(home: Path, tmp_path: Path) -> None:
    for n in range(5):
        (tmp_path / f"note{n}.md").write_text(f"# Note {n}\n\nRoom {n} is cleaned on day {n}.")
    added = onebox(home, "kb", "add", str(tmp_path), "-c", "notes")
    assert added.returncode == 0, added.stderr
    last = [line for line in added.stderr.splitlines() if line.startswith("kb add:")][-1]
    assert last.startswith("kb add: 5/5 files, 5/5 chunks embedded,") and "chunks/s" in last
    assert "5 documents in 'notes'" in added.stdout

    (tmp_path / "note9.md").write_text("# Note 9\n\nThe boiler is serviced every May.")
    as_json = onebox(home, "kb", "add", str(tmp_path), "-c", "notes", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert len(json.loads(as_json.stdout)["documents"]) == 6  # stdout is only the JSON
    assert "kb add:" not in as_json.stderr

    remembered = onebox(home, "memory", "remember", "The deploy key rotates monthly.", "-s", "p")
    assert remembered.returncode == 0, remembered.stderr
    reembedded = onebox(home, "kb", "reembed", "--json")
    assert reembedded.returncode == 0, reembedded.stderr
    data = json.loads(reembedded.stdout)
    assert data["reembedded"] == {"notes": 6} and data["memories"] == 1
