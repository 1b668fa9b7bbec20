"""Network grants (onebox.domains): every form the docs give parses, IPv6 with a port included
(issue 37, case 6: `[::1]:8080` was refused), and near misses are refused with the forms."""

from __future__ import annotations

import pytest

from onebox.domains import DomainRule, allowed
from onebox.errors import PolicyViolation


@pytest.mark.parametrize(("text", "pattern", "port"), [
    ("[::1]:8080", "::1", 8080), ("[::1]", "::1", None), ("::1", "::1", None),
    ("[2001:DB8::1]:443", "2001:db8::1", 443), ("[0:0::1]:9", "::1", 9),
    ("example.com:8443", "example.com", 8443), ("*.example.org", "*.example.org", None),
    ("10.0.0.1:5432", "10.0.0.1", 5432),
])
def test_every_grant_form_parses(text: str, pattern: str, port: int | None) -> None:
    rule = DomainRule.parse(text)
    assert (rule.pattern, rule.port) == (pattern, port)


@pytest.mark.parametrize("text", ["[::1", "[::1]x", "[::1]:", "[::1]:99999", "[not]:80",
                                  "[1.2.3.4]:80", "*", "http://example.com", "a b"])
def test_near_misses_are_refused_with_the_forms(text: str) -> None:
    with pytest.raises(PolicyViolation, match=r"\[::1\]:8080"):
        DomainRule.parse(text)


def test_an_ipv6_grant_matches_its_address_in_any_spelling_and_only_its_port() -> None:
    rules = [DomainRule.parse("[::1]:8080")]
    assert allowed(rules, "::1", 8080) and allowed(rules, "[0:0::1]", 8080)
    assert not allowed(rules, "::1", 443) and not allowed(rules, "::2", 8080)
