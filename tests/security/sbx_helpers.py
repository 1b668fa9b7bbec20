"""Helpers shared by the security tests (imported by module name: tests/ is not a package)."""

from __future__ import annotations

from onebox.sandbox.base import ExecRequest, ExecResult, Limits, NetworkPolicy
from onebox.sandbox.linux import BwrapSandbox

DISK_MB = 32


async def sh(
    backend: BwrapSandbox,
    code: str,
    session: str = "sec",
    language: str = "python",
    domains: tuple[str, ...] = (),
    **limits: float,
) -> ExecResult:
    request = ExecRequest(
        session_id=session,
        code=code,
        language=language,  # type: ignore[arg-type]
        limits=Limits(**limits),  # type: ignore[arg-type]
        network=NetworkPolicy(allow_domains=domains),
    )
    return await backend.execute(request)
