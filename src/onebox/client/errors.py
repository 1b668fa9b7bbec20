"""The API's error body ``{code, message, field}`` as the package's own exceptions.

A code the package knows (``not_found``, ``invalid_plan``, ``conflict``...) becomes that
class of ``onebox.errors``; 401 becomes ``Unauthorized`` (a ConfigError: the key is wrong
or missing); anything else an ``ApiError`` carrying the HTTP status. A server that cannot be
reached is ``ServerUnreachable``, naming the URL.
"""

from __future__ import annotations

from typing import Any

from onebox import errors as tree


class Unauthorized(tree.ConfigError):
    """The API refused the key: none was given, or it is unknown or revoked."""

    code = "unauthorized"
    http_status = 401


class ApiError(tree.OneboxError):
    """An error status whose code this SDK does not know."""

    code = "api_error"


class ServerUnreachable(tree.OneboxError):
    """No answer from the server at all (connection refused, DNS, timeout)."""

    code = "server_unreachable"
    http_status = 503


def _by_code() -> dict[str, type[tree.OneboxError]]:
    found: dict[str, type[tree.OneboxError]] = {}
    pending: list[type[tree.OneboxError]] = [tree.OneboxError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    found["unauthorized"] = Unauthorized
    return found


def _make(cls: type[tree.OneboxError], message: str, field: str | None) -> tree.OneboxError:
    """An instance without the class's own __init__ (PlanError would prefix the field again,
    CommandFailed wants a result): the server already wrote the whole message."""
    exc = cls.__new__(cls)
    tree.OneboxError.__init__(exc, message, field=field)
    return exc


def from_response(status: int, body: Any, url: str) -> tree.OneboxError:
    data = body if isinstance(body, dict) else {}
    code = str(data.get("code") or "")
    message = str(data.get("message") or f"HTTP {status} from {url}")
    field = data.get("field") if isinstance(data.get("field"), str) else None
    cls = _by_code().get(code)
    if cls is None or cls is tree.OneboxError:
        cls = Unauthorized if status == 401 else ApiError
    exc = _make(cls, message, field)
    exc.status = status  # type: ignore[attr-defined]
    exc.body = data  # type: ignore[attr-defined]
    return exc


def unreachable(url: str, cause: BaseException) -> ServerUnreachable:
    return ServerUnreachable(
        f"cannot reach the onebox server at {url}: {type(cause).__name__}: {cause}. Is "
        "`onebox serve` (or `onebox up`) running there? Set ONEBOX_URL or pass base_url=.",
        field="base_url")
