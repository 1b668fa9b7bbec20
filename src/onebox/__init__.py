"""onebox: one agent, one sandbox, one database.

The public API is the SDK (``Client``, ``AsyncClient``) and the error tree. Both load on first
use, so ``import onebox`` (and the ``onebox`` command) stays light. This file, errors.py and
client/ are also the client-only distribution (clients/python, ``onebox-client``): they import
only each other, the standard library and httpx (tests/unit/test_layers.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onebox.client import AsyncClient, Client, ServerUnreachable, Unauthorized
    from onebox.errors import (
        AgentError,
        CommandFailed,
        ConfigError,
        Conflict,
        NotFound,
        OneboxError,
        PlanError,
        PolicyViolation,
        ProviderError,
        SandboxError,
        StorageError,
        ValidationError,
    )

_WHERE = {
    "Client": "onebox.client", "AsyncClient": "onebox.client",
    "ServerUnreachable": "onebox.client", "Unauthorized": "onebox.client",
    **{name: "onebox.errors" for name in (
        "OneboxError", "ConfigError", "ValidationError", "PlanError", "NotFound", "Conflict",
        "ProviderError", "SandboxError", "PolicyViolation", "StorageError",
        "AgentError", "CommandFailed")},
}

__all__ = ["AgentError", "AsyncClient", "Client", "CommandFailed", "ConfigError", "Conflict",
           "NotFound", "OneboxError", "PlanError", "PolicyViolation", "ProviderError",
           "SandboxError", "ServerUnreachable", "StorageError", "Unauthorized",
           "ValidationError"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'onebox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
