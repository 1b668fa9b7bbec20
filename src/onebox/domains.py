"""Network grants: which host and port a step may reach (``allow_domains``).

Pure: the egress proxy enforces these rules and plan validation checks an http step's URL
against the same ones, so a plan is never accepted for a grant the proxy would refuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from onebox.errors import PolicyViolation

DEFAULT_PORTS = (80, 443)


@dataclass(frozen=True)
class DomainRule:
    """``api.example.com``, ``*.example.org`` (subdomains only), optionally ``:port``."""

    pattern: str
    port: int | None

    @classmethod
    def parse(cls, text: str) -> DomainRule:
        raw = text.strip().lower().rstrip(".")
        host, _, port = raw.rpartition(":") if raw.count(":") == 1 else (raw, "", "")
        if not host or " " in host or "/" in host:
            raise PolicyViolation(f"invalid allowed domain {text!r}", field="network.allow_domains")
        if port and not port.isdigit():
            raise PolicyViolation(f"invalid port in {text!r}", field="network.allow_domains")
        return cls(host, int(port) if port else None)

    def matches(self, host: str, port: int) -> bool:
        if self.port is None and port not in DEFAULT_PORTS:
            return False
        if self.port is not None and port != self.port:
            return False
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:]) and host != self.pattern[2:]
        return host == self.pattern


def allowed(rules: Sequence[DomainRule], host: str, port: int) -> bool:
    host = host.lower().rstrip(".")
    return any(rule.matches(host, port) for rule in rules)
