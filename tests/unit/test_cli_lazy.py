"""The CLI imports a command's module only when that command runs, and its map of
command -> module is exactly what the modules register."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
from click.testing import CliRunner

from onebox.cli.main import COMMAND_MODULES, COMMANDS, main


def test_the_map_names_every_command_each_module_registers() -> None:
    registered: dict[str, str] = {}
    for module in COMMAND_MODULES:
        group = click.Group()
        importlib.import_module(module).register(group)
        registered.update(dict.fromkeys(group.commands, module))
    assert registered == COMMANDS


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines()
              if line.strip()}
    assert listed == set(COMMANDS)


def test_a_light_command_does_not_import_the_server_or_the_agent() -> None:
    probe = ("import sys\nfrom onebox.cli.main import main\n"
             "main.get_command(None, 'exec')\n"
             "print(sorted(m for m in ('fastapi', 'onebox.api', 'onebox.agent.actions') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
