"""`onebox serve` (API + console), `onebox up` (the same plus a worker) and `onebox keys`."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
from pathlib import Path
from typing import Any

import click

from onebox.cli import common
from onebox.cli.listener import bound_port, listen, recorded_address
from onebox.config import Settings
from onebox.runtime.services import api_keys
from onebox.store.db import Database

FIRST_KEY_FILE = "first-api-key"


def register(main: click.Group) -> None:
    main.add_command(serve_cmd)
    main.add_command(up_cmd)
    main.add_command(keys)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    """Listening beyond loopback without API keys would hand the sandbox to the network."""
    if not settings.api.auth and not is_loopback(settings.api.host):
        common.fail(f"refusing to listen on {settings.api.host} without authentication: anyone "
                    "who can reach it could run code. Listen on 127.0.0.1, or keep auth on "
                    "(drop --no-auth / ONEBOX_API__AUTH=false) and create keys with "
                    "`onebox keys create`.", code=2)


def _configure(host: str | None, port: int | None,
               no_auth: bool) -> tuple[Settings, socket.socket]:
    """The settings and the listening socket: bound before anything is printed."""
    settings = common.settings()
    if host is not None:
        settings.api.host = host
    if port is not None:
        settings.api.port = port
    if no_auth:
        settings.api.auth = False
    check_exposure(settings)
    sock = _listen(settings)
    if not settings.api.auth:
        from onebox.peers import no_auth_banner

        common.err.print(no_auth_banner(), markup=False)
    return settings, sock


def _url(settings: Settings) -> str:
    host = settings.api.host
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{settings.api.port}"


async def _serve(settings: Settings, sock: socket.socket, *, worker: bool) -> None:
    import uvicorn

    from onebox.api import create_app

    app = create_app(settings, worker=worker)
    config = uvicorn.Config(app, host=settings.api.host, port=settings.api.port,
                            log_level=settings.log_level.lower(), access_log=False)
    server = uvicorn.Server(config)
    # SIGTERM and SIGINT shut down gracefully (the in-process worker drains) and the command
    # exits 0, as `onebox worker` does; uvicorn's own handling re-raises the signal after
    # its shutdown, so the process died of it (exit -15) as if it had not drained.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stopper(server))
    with recorded_address(settings.home, _url(settings)):
        await server.serve(sockets=[sock])


def _listen(settings: Settings) -> socket.socket:
    """Bind first: a busy port stops here, before any banner, key or record. A port of 0
    becomes the one the kernel chose (shown, recorded and advertised)."""
    sock = common.run_sync(lambda: listen(settings.api.host, settings.api.port, settings.home))
    settings.api.port = bound_port(sock)
    return sock


def _stopper(server: Any) -> Any:
    def stop() -> None:
        server.force_exit = server.should_exit  # a second signal: leave now
        server.should_exit = True
    return stop


async def _up(settings: Settings, sock: socket.socket) -> None:
    """`onebox up` in one event loop: the first key, the banner, then the server (a Ctrl-C
    at any point is one clean stop)."""
    key = await first_key(settings) if settings.api.auth else None
    common.echo(f"onebox is up: {_url(settings)}/ui/")
    if key is not None:
        common.echo(f"API key (tenant 'default'): {key}")
    elif settings.api.auth:
        common.echo("API keys exist already; `onebox keys create` makes a new one")
    await _serve(settings, sock, worker=True)


host_option = click.option("--host", help="address to listen on (default ONEBOX_API__HOST, "
                           "127.0.0.1)")
port_option = click.option("--port", type=click.IntRange(0, 65535),
                           help="port (default ONEBOX_API__PORT, 8420)")
no_auth_option = click.option("--no-auth", is_flag=True,
                              help="no API keys: every caller is tenant 'default' (loopback "
                              "only, and only connections from this user's uid)")


@click.command("serve")
@host_option
@port_option
@no_auth_option
def serve_cmd(host: str | None, port: int | None, no_auth: bool) -> None:
    """Serve the HTTP API and the web console (steps run in `onebox worker`s)."""
    settings, sock = _configure(host, port, no_auth)
    common.err.print(f"onebox API and console on {_url(settings)}/ui/ "
                     f"(auth {'on' if settings.api.auth else 'OFF'})", markup=False)
    common.run(_serve(settings, sock, worker=False))


@click.command("up")
@host_option
@port_option
@no_auth_option
def up_cmd(host: str | None, port: int | None, no_auth: bool) -> None:
    """Everything in one process: API, console and a worker, on the embedded database."""
    settings, sock = _configure(host, port, no_auth)
    common.run(_up(settings, sock))


async def first_key(settings: Settings) -> str | None:
    """The first API key: created when there is none, kept (mode 0600) in ONEBOX_HOME."""
    path = settings.home / FIRST_KEY_FILE
    db = await Database.open(settings)
    try:
        if path.exists():
            key = path.read_text().strip()
            if await api_keys.authenticate(db, key) is not None:
                return key
        if await api_keys.count_active_keys(db) > 0:
            return None
        key, _ = await api_keys.create_key(db, tenant_id="default", name="first key (onebox up)")
    finally:
        await db.close()
    _write_secret(path, key)
    return key


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")


@click.group("keys")
def keys() -> None:
    """API keys: each belongs to a tenant and sees only that tenant's data."""


async def _with_db(fn: Any) -> Any:
    db = await Database.open(common.settings())
    try:
        return await fn(db)
    finally:
        await db.close()


@keys.command("create")
@click.option("--tenant", default="default", show_default=True)
@click.option("--name", default="api key", show_default=True, help="what the key is for")
@common.json_option
def create_cmd(tenant: str, name: str, as_json: bool) -> None:
    """Create a key; it is printed once and only its hash is stored."""
    key, row = common.run(_with_db(lambda db: api_keys.create_key(db, tenant_id=tenant, name=name)))
    if as_json:
        common.print_json({**row, "key": key})
        return
    common.echo(key)
    common.err.print(f"key {row['prefix']}… for tenant {tenant!r} created; store it now, it "
                     "cannot be shown again", markup=False)


@keys.command("list")
@click.option("--tenant", help="only this tenant's keys")
@common.json_option
def list_cmd(tenant: str | None, as_json: bool) -> None:
    """List keys (prefix, tenant, name, last use); never the keys themselves."""
    rows = common.run(_with_db(lambda db: api_keys.list_keys(db, tenant_id=tenant)))
    if as_json:
        common.print_json({"keys": rows})
        return
    for r in rows:
        state = "revoked" if r["revoked_at"] else "active"
        used = f"{r['last_used_at']:%Y-%m-%d %H:%M}" if r["last_used_at"] else "never"
        common.echo(f"{r['prefix']}  {r['id']}  {r['tenant_id']:<16} {state:<8} used {used}  "
                   f"{r['name']}")


@keys.command("revoke")
@click.argument("key")
@common.json_option
def revoke_cmd(key: str, as_json: bool) -> None:
    """Revoke a key by id or prefix; requests with it are refused at once."""
    row = common.run(_with_db(lambda db: api_keys.revoke_key(db, key)))
    if as_json:
        common.print_json(row)
    else:
        common.echo(f"revoked {row['prefix']} ({row['tenant_id']}: {row['name']})")
