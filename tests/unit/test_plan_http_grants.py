"""An http step's URL is checked with the egress proxy's own rules."""

from __future__ import annotations

import pytest

from onebox.agent.plan import parse_plan
from onebox.errors import PlanError


def test_an_http_steps_url_is_checked_with_the_proxys_own_rules() -> None:
    """Plan validation grants what the egress proxy grants: host:port for another port, a
    wildcard for subdomains; a grant the proxy would refuse is refused before the run."""

    def http(url: str, *domains: str) -> dict:
        return {"steps": [{"id": "h", "kind": "http", "input": {"url": url},
                           "allow_domains": list(domains)}]}

    parse_plan(http("http://127.0.0.1:8765/x", "127.0.0.1:8765"))
    parse_plan(http("https://api.example.com/v1", "*.example.com"))
    parse_plan(http("https://api.example.com/v1", "api.example.com"))
    with pytest.raises(PlanError, match="'127.0.0.1:8765'"):
        parse_plan(http("http://127.0.0.1:8765/x", "127.0.0.1"))  # the proxy checks ports
    with pytest.raises(PlanError, match="allow_domains"):
        parse_plan(http("https://example.com/", "*.example.com"))  # subdomains only
    with pytest.raises(PlanError) as caught:
        parse_plan(http("https://api.example.com/", "api.example.com:http"))
    assert caught.value.field == "steps[h].allow_domains"
