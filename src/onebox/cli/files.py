"""`onebox files RUN [--get PATH] [--zip OUT.zip]`: the deliverables a run kept."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from onebox.cli.common import json_option, out, print_json, run, settings
from onebox.cli.snapshot import opened
from onebox.runtime.engine import run_outputs
from onebox.runtime.services.runs import resolve_id


def register(main: click.Group) -> None:
    main.add_command(files_cmd)


@click.command("files")
@click.argument("run_id")
@click.option("--get", "get_path", metavar="PATH", help="write this one output to stdout")
@click.option("--zip", "zip_path", type=click.Path(dir_okay=False, path_type=Path),
              help="write every output and manifest.json into this zip file")
@json_option
def files_cmd(run_id: str, get_path: str | None, zip_path: Path | None, as_json: bool) -> None:
    """The files RUN_ID kept (its deliverables): path, size, sha256, the step that wrote it."""
    run(_files(run_id, get_path, zip_path, as_json))


async def _files(text: str, get_path: str | None, zip_path: Path | None, as_json: bool) -> None:
    async with opened(settings()) as (db, objects):
        run_id = await resolve_id(db, text)
        if get_path is not None:
            data = await run_outputs.artifact(db, objects, run_id, get_path)
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        if zip_path is not None:
            zip_path.write_bytes(await run_outputs.artifacts_zip(db, objects, run_id))
            out.print(f"wrote {zip_path}")
            return
        rows = await run_outputs.manifest(db, run_id)
    if as_json:
        print_json({"run_id": run_id, "files": rows})
        return
    out.print(_table(rows) if rows else f"run {run_id} kept no files")


def _table(rows: list[dict[str, object]]) -> Table:
    table = Table("path", "bytes", "sha256", "step", box=None)
    for r in rows:
        table.add_row(str(r["path"]), str(r["size_bytes"]), str(r["sha256"])[:12],
                      str(r["step_id"]))
    return table
