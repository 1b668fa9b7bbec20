"""The listening socket the servers are given: small answers must not wait for a delayed ACK."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from onebox.cli.listener import listen


def test_accepted_connections_have_nagle_off(tmp_path: Path) -> None:
    """asyncio turns TCP_NODELAY on for accepted connections only when the listening socket
    says it is TCP; without it every small response waits ~40 ms for the client's ACK."""
    sock = listen("127.0.0.1", 0, tmp_path)

    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("socket")
            accepted.set_result(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        port = sock.getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(accepted, 5)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(main()) != 0
