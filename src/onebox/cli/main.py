"""The `onebox` command: a thin shell over the runtime. Each command group lives in its own module."""

from __future__ import annotations

import importlib

import click

# Modules that add commands to `main`; each defines `register(main: click.Group) -> None`.
COMMAND_MODULES = (
    "onebox.cli.runs",
    "onebox.cli.logs",
    "onebox.cli.kb",
    "onebox.cli.tools",
    "onebox.cli.profile",
    "onebox.cli.env",
    "onebox.cli.memory",
    "onebox.cli.doctor",
    "onebox.cli.db",
    "onebox.cli.worker",
    "onebox.cli.schedule",
    "onebox.cli.snapshot",
    "onebox.cli.files",
    "onebox.cli.gc",
    "onebox.cli.serve",
    "onebox.cli.exec",
    "onebox.cli.mcp",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onebox")
def main() -> None:
    """onebox: one agent, one sandbox, one database."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(main)
