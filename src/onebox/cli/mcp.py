"""`onebox mcp`: serve the Model Context Protocol (stdio by default, or streamable HTTP)."""

from __future__ import annotations

import click

from onebox.cli import common
from onebox.cli.listener import bound_port, listen
from onebox.cli.serve import is_loopback
from onebox.errors import ConfigError


def register(main: click.Group) -> None:
    main.add_command(mcp_cmd)


@click.command("mcp")
@click.option("--http", "use_http", is_flag=True,
              help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to listen on (with --http)")
@click.option("--port", type=click.IntRange(0, 65535), default=8421, show_default=True,
              help="port (with --http)")
@click.option("--no-auth", is_flag=True, help="HTTP without API keys: every caller is tenant "
              "'default' (loopback only, and only connections from this user's uid)")
@click.option("--no-worker", is_flag=True, help="do not run steps in this process; runs wait "
              "for an `onebox worker` (or `onebox up`)")
def mcp_cmd(use_http: bool, host: str, port: int, no_auth: bool, no_worker: bool) -> None:
    """Serve onebox's tools (execute code, runs, knowledge, memory) to MCP clients.

    Over stdio (the default) the client spawns this command and acts as tenant 'default'.
    Over --http each request needs `Authorization: Bearer <API key>` and acts as the key's
    tenant, unless --no-auth (loopback only, connections from this user's uid only). Runs are executed by a worker started in this
    process, like `onebox up`; --no-worker leaves them to separate workers.
    """
    from onebox.mcp import transports
    from onebox.peers import no_auth_banner

    settings = common.settings()
    if not use_http:
        common.run(transports.serve_stdio(settings, worker=not no_worker))
        return
    if no_auth:
        settings.api.auth = False
    try:
        transports.check_exposure(settings, host, is_loopback(host))
    except ConfigError as exc:
        common.fail(exc.message, code=2)
    sock = common.run_sync(lambda: listen(host, port, settings.home))  # before any banner
    port = bound_port(sock)
    common.err.print(f"onebox MCP on http://{host}:{port}{transports.HTTP_PATH} "
                     f"(auth {'on' if settings.api.auth else 'OFF'})", markup=False)
    if not settings.api.auth:
        common.err.print(no_auth_banner(), markup=False)
    common.run(transports.serve_http(settings, sock, host=host, worker=not no_worker))
