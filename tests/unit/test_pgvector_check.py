"""An external PostgreSQL without pgvector is refused with an error that says how to fix it."""

from __future__ import annotations

from typing import Any

import pytest

from onebox.errors import ConfigError
from onebox.store.db import _ensure_pgvector


class _Cursor:
    def __init__(self, row: Any) -> None:
        self.row = row

    async def fetchone(self) -> Any:
        return self.row


class ServerWithoutPgvector:
    """Answers the availability query the way a server without the extension does."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    async def execute(self, sql: str, params: Any = None) -> _Cursor:
        self.statements.append(sql)
        return _Cursor(None)


async def test_missing_pgvector_stops_with_install_instructions() -> None:
    server = ServerWithoutPgvector()
    with pytest.raises(ConfigError) as info:
        await _ensure_pgvector(server)  # type: ignore[arg-type]
    message = info.value.message
    assert "pgvector is not installed" in message
    assert "postgresql-<major>-pgvector" in message and "CREATE EXTENSION vector" in message
    assert not any("CREATE EXTENSION" in s for s in server.statements)
