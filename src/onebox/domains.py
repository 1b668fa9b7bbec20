"""Network grants: which host and port a step may reach (``allow_domains``).

Pure: the egress proxy enforces these rules and plan validation checks an http step's URL
against the same ones, so a plan is never accepted for a grant the proxy would refuse.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from onebox.errors import PolicyViolation

DEFAULT_PORTS = (80, 443)
FORMS = ("give a host name (api.example.com), its subdomains (*.example.com) or an IP "
         "address, optionally with :port (example.com:8443, [::1]:8080; default ports 80 "
         "and 443); no scheme, path, spaces or bare '*' (every host is never granted)")
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")


def _is_host(host: str) -> bool:
    """A DNS name (``*.`` allowed in front, for subdomains) or an IP address literal."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = host[2:] if host.startswith("*.") else host
    labels = name.split(".")
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in labels)


@dataclass(frozen=True)
class DomainRule:
    """``api.example.com``, ``*.example.org`` (subdomains only), optionally ``:port``."""

    pattern: str
    port: int | None

    @classmethod
    def parse(cls, text: str, field: str = "network.allow_domains") -> DomainRule:
        """The rule, or a PolicyViolation naming ``field`` and the forms a grant takes."""
        raw = text.strip().lower().rstrip(".")
        host, port = _host_and_port(raw)
        if "/" in raw or not _is_host(host):
            raise PolicyViolation(f"invalid allowed domain {text!r}: {FORMS}", field=field)
        if port and not (port.isdigit() and int(port) < 65536):
            raise PolicyViolation(f"invalid port in {text!r} (at most 65535): {FORMS}",
                                  field=field)
        return cls(_canonical(host), int(port) if port else None)

    def matches(self, host: str, port: int) -> bool:
        if self.port is None and port not in DEFAULT_PORTS:
            return False
        if self.port is not None and port != self.port:
            return False
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:]) and host != self.pattern[2:]
        return host == self.pattern


def _host_and_port(raw: str) -> tuple[str, str]:
    """``[v6]:port``, ``[v6]``, ``host:port``, ``host`` or a bare IPv6 address."""
    if raw.startswith("["):
        inside, bracket, rest = raw[1:].partition("]")
        if not bracket or ":" not in inside or (rest and not (rest.startswith(":") and rest[1:])):
            return raw, ""  # brackets hold an IPv6 address, closed, then nothing or :port
        return inside, rest[1:]
    if raw.count(":") == 1:
        host, _, port = raw.partition(":")
        return host, port
    return raw, ""


def _canonical(host: str) -> str:
    """An IP address in its one compressed form (``0:0::1`` and ``::1`` are one host)."""
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host


def allowed(rules: Sequence[DomainRule], host: str, port: int) -> bool:
    host = _canonical(host.lower().rstrip(".").removeprefix("[").removesuffix("]"))
    return any(rule.matches(host, port) for rule in rules)
