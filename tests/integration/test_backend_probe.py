"""`sandbox.backend: auto` picks bubblewrap whenever it works, also on a machine where other
processes mount and remove directories meanwhile (another onebox's warm pool does): a probe
that failed there fell back to the 'process' backend, with no isolation at all."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from onebox.sandbox.registry import linux_available

PROBES = 150


def _churn(base: Path, stop: threading.Event, worker: int) -> None:
    """Mount a tmpfs on a fresh dir, unmount it and remove the dir, over and over."""
    turn = 0
    while not stop.is_set():
        point = base / f"w{worker}-{turn % 4}"
        turn += 1
        with contextlib.suppress(OSError):
            point.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(point)], capture_output=True)
            subprocess.run(["umount", str(point)], capture_output=True)
            point.rmdir()


def test_the_probe_holds_while_mounts_come_and_go() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if linux_available():
        pytest.skip("bubblewrap cannot run here: " + "; ".join(linux_available()))
    base = Path(tempfile.mkdtemp(prefix="onebox-probe-churn-"))
    base.chmod(0o755)
    stop = threading.Event()
    churners = [threading.Thread(target=_churn, args=(base, stop, n)) for n in range(2)]
    for thread in churners:
        thread.start()
    try:
        failed = [problems for _ in range(PROBES) if (problems := linux_available())]
    finally:
        stop.set()
        for thread in churners:
            thread.join()
        subprocess.run(["umount", "-R", "-l", *map(str, base.iterdir())], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    assert failed == [], f"{len(failed)} of {PROBES} probes failed: {failed[0]}"
