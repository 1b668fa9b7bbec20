"""`onebox gc`: remove finished runs past retention, whole (see runtime.retention)."""

from __future__ import annotations

import re

import click

from onebox.cli.common import json_option, out, print_json, run, settings
from onebox.config import Settings
from onebox.errors import ValidationError
from onebox.objects import get_object_store
from onebox.runtime.engine.retention import RetentionReport, RetentionRule, collect
from onebox.store.db import Database

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_duration_s(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` -> seconds (more than zero)."""
    match = _DURATION.match(text.lower())
    if match is None or float(match.group(1)) <= 0:
        raise ValidationError(
            f"--older-than {text!r} is not a duration: give a number and a unit, "
            "e.g. 30d, 12h, 90m, 45s or 2w", field="older_than")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def rule_of(cfg: Settings, older_than: str | None, keep: int | None) -> RetentionRule:
    """The command line's rule; without options, the configured one (retention.*)."""
    if older_than is None and keep is None:
        rule = RetentionRule.from_settings(cfg.retention)
        if not rule.enabled:
            raise ValidationError(
                "nothing to remove: give --older-than (e.g. 30d) and/or --keep N, or set "
                "ONEBOX_RETENTION__MAX_AGE_DAYS / ONEBOX_RETENTION__MAX_RUNS", field="older_than")
        return rule
    return RetentionRule(None if older_than is None else parse_duration_s(older_than), keep)


@click.command("gc")
@click.option("--older-than", "older_than", metavar="AGE",
              help="remove finished runs that ended longer ago than AGE (30d, 12h, 90m, 45s)")
@click.option("--keep", type=click.IntRange(1), default=None, metavar="N",
              help="keep the newest N runs of each tenant; remove older finished ones")
@click.option("--dry-run", is_flag=True, help="only count what would be removed")
@json_option
def gc_cmd(older_than: str | None, keep: int | None, dry_run: bool, as_json: bool) -> None:
    """Remove finished runs past retention, with their events, attempts, sessions,
    snapshots and the snapshot objects nothing else uses.

    Without options it applies the configured rule (retention.max_age_days,
    retention.max_runs). Running and waiting runs are never removed.
    """
    cfg = settings()

    async def go() -> RetentionReport:
        rule = rule_of(cfg, older_than, keep)
        store = get_object_store(cfg)
        db = await Database.open(cfg)
        try:
            return await collect(db, store, rule, dry_run=dry_run,
                                 batch_runs=cfg.retention.batch_runs)
        finally:
            await db.close()
            await store.close()

    report = run(go())
    if as_json:
        print_json(report.to_json())
        return
    verb = "would remove" if dry_run else "removed"
    out.print(f"{verb} {report.runs} runs: {report.events} events, {report.attempts} attempts, "
              f"{report.sessions} sessions, {report.snapshots} snapshots, "
              f"{report.objects_deleted} objects")


def register(main: click.Group) -> None:
    main.add_command(gc_cmd)
