"""The `onebox` command: a thin shell over the runtime. Each command group lives in its own module.

Modules are imported when one of their commands is used, not all at start: `onebox exec` or
`onebox logs` should not pay for the web server and the agent (about 0.7 s of imports).
"""

from __future__ import annotations

import importlib

import click

from onebox.suggest import close_match

# Each command -> the module that adds it (and its siblings) to `main` through
# `register(main: click.Group) -> None`. tests/unit/test_cli_lazy.py checks this map
# against what every module really registers.
COMMANDS: dict[str, str] = {
    **dict.fromkeys(("run", "runs", "show", "explain", "cancel", "approve", "retry"),
                    "onebox.cli.runs"),
    **dict.fromkeys(("fork", "diff"), "onebox.cli.fork"),
    "logs": "onebox.cli.logs",
    "files": "onebox.cli.files",
    "exec": "onebox.cli.exec",
    "kb": "onebox.cli.kb",
    "memory": "onebox.cli.memory",
    "tools": "onebox.cli.tools",
    "profile": "onebox.cli.profile",
    "provider": "onebox.cli.provider",
    "env": "onebox.cli.env",
    "schedule": "onebox.cli.schedule",
    **dict.fromkeys(("snapshot", "replay"), "onebox.cli.snapshot"),
    **dict.fromkeys(("up", "serve", "keys"), "onebox.cli.serve"),
    "worker": "onebox.cli.worker",
    "mcp": "onebox.cli.mcp",
    "doctor": "onebox.cli.doctor",
    "db": "onebox.cli.db",
    "gc": "onebox.cli.gc",
    "chat": "onebox.cli.chat",
    "thread": "onebox.cli.thread",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


class LazyGroup(click.Group):
    """A group that imports a command's module the first time the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(COMMANDS[cmd_name]).register(self)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, but a mistyped command is answered with the one it is a typo of."""
        name = args[0]
        if self.get_command(ctx, name) is None and not ctx.resilient_parsing \
                and not name.startswith("-"):
            match = close_match(name, self.list_commands(ctx))
            if match is not None:
                ctx.fail(f"No such command {name!r}. Did you mean {match!r}?")
        return super().resolve_command(ctx, args)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onebox")
def main() -> None:
    """onebox: one agent, one sandbox, one database."""
