"""Choose the sandbox backend from Settings: ``linux``, ``process`` or ``auto``.

``auto`` picks ``linux`` when bubblewrap can create user namespaces on this
machine, else ``process``, and logs a warning (``health()`` repeats it).
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Callable

from onebox.config import Settings
from onebox.errors import ConfigError, SandboxUnavailable
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.linux import BwrapSandbox
from onebox.sandbox.linux_support import probe_bwrap
from onebox.sandbox.process import ProcessSandbox

logger = logging.getLogger(__name__)

BACKENDS: dict[str, Callable[[Settings], SandboxBackend]] = {
    "linux": BwrapSandbox,
    "process": ProcessSandbox,
}


def linux_available() -> list[str]:
    """Empty when the linux backend can run here, else the problems with their fixes."""
    if not sys.platform.startswith("linux"):
        return [f"the linux backend needs Linux, this is {sys.platform}"]
    return probe_bwrap(shutil.which("bwrap") or "/usr/bin/bwrap")


def get_backend(settings: Settings) -> SandboxBackend:
    """The backend ``settings.sandbox.backend`` names (``auto``: the strongest that works)."""
    choice = settings.sandbox.backend
    if choice == "auto":
        problems = linux_available()
        if problems:
            logger.warning(
                "sandbox: using the 'process' backend (NO isolation) because %s",
                "; ".join(problems),
            )
            return ProcessSandbox(settings, fallback_reason="; ".join(problems))
        return BwrapSandbox(settings)
    if choice not in BACKENDS:
        raise ConfigError(f"unknown sandbox backend {choice!r}", field="sandbox.backend")
    if choice == "linux":
        problems = linux_available()
        if problems:
            raise SandboxUnavailable("linux sandbox unavailable: " + "; ".join(problems))
    return BACKENDS[choice](settings)
