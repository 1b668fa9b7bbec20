"""`onebox db status|url|stop`: the embedded PostgreSQL as a service you can see and stop."""

from __future__ import annotations

import click

from onebox.cli import common
from onebox.store.embedded import embedded_status, stop_embedded


def register(main: click.Group) -> None:
    main.add_command(db_group)


@click.group("db")
def db_group() -> None:
    """The embedded database (ignored when DATABASE_URL points elsewhere)."""


@db_group.command("status")
@common.json_option
def status_cmd(as_json: bool) -> None:
    """Is the embedded server running, and where."""
    settings = common.settings()
    status = embedded_status(settings.pg_dir, settings.db_embedded)
    status["external"] = settings.database_url is not None
    if as_json:
        common.print_json(status)
    elif status["external"]:
        common.echo("DATABASE_URL is set: onebox uses that server, not the embedded one")
    elif status["running"]:
        common.echo(f"{status['engine']} (PostgreSQL {status['engine_version']}) running "
                   f"(pid {status['pid']}) in {status['data_dir']}\n{status['url']}")
    else:
        common.echo(f"not running; data dir {status['data_dir']}; any onebox command starts it")


@db_group.command("url")
def url_cmd() -> None:
    """Print the connection URL (for psql), starting the embedded server if needed."""
    settings = common.settings()
    if settings.database_url is not None:
        common.echo(settings.database_url.get_secret_value())
        return
    from onebox.store.embedded import start_embedded

    _, url = common.run_sync(lambda: start_embedded(
        settings.pg_dir, keep_running=True, engine_name=settings.db_embedded))
    common.echo(url)


@db_group.command("stop")
def stop_cmd() -> None:
    """Stop the embedded server (the next onebox command starts it again)."""
    settings = common.settings()
    stopped = common.run_sync(lambda: stop_embedded(settings.pg_dir, settings.db_embedded))
    common.echo("stopped" if stopped else "was not running")
