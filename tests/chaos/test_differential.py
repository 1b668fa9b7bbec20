"""Placement independence (issue 36): the same seeded random plans give the same step outputs
and the same final files on one host with one worker, on three hosts, on three hosts whose
workers are SIGKILLed and one of which is cut off past its lease, and on the network-namespace
cluster (PostgreSQL over TCP, an S3 server) whose workers are SIGKILLed and whose hosts lose
their link. A few seeds here; `python tests/chaos/differential.py --seeds 200` runs the long
set and prints the counts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from differential import MODES, Outcome, differences, random_plan, replay_hint, run_mode

from onebox.config import Settings
from onebox.store.db import Database

SEEDS = (3, 6, 7, 11)


async def test_seeded_plans_compute_the_same_on_one_host_three_and_a_faulty_three(
        db: Database, db_url: str, settings: Settings, tmp_path: Path,
        unmount_below: Callable[[Path], None]) -> None:
    base = tmp_path / "hosts"
    base.mkdir()
    base.chmod(0o755)
    plans = {seed: random_plan(seed) for seed in SEEDS}
    results: dict[str, dict[int, Outcome]] = {}
    try:
        for mode in MODES:
            results[mode], chaos = await run_mode(db, settings, db_url, plans, mode, base,
                                                  timeout_s=240)
            if chaos is not None:
                assert chaos.kills >= 1, "the faulty cluster killed no worker: the probe is void"
    finally:
        unmount_below(base)
    bad = differences(results)
    assert not bad, "\n".join(f"seed {s}: {why}\n  replay: {replay_hint(s)}"
                              for s, why in bad.items())
