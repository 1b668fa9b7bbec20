"""Named SQL: queries live in ``store/sql/<aggregate>.sql`` as blocks headed ``-- name: <name>``.

    Q = load_queries("runs")
    await conn.execute(Q["insert_run"], params)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@cache
def load_queries(aggregate: str) -> Mapping[str, str]:
    text = resources.files("onebox.store.sql").joinpath(f"{aggregate}.sql").read_text()
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"store/sql/{aggregate}.sql defines '{name}' twice")
        queries[name] = body.strip().rstrip(";")
    return MappingProxyType(queries)
