"""/v1/profiles: per tenant, validated field by field, never storing a key."""

from __future__ import annotations

from api_helpers import Api

from onebox.config import ProviderSettings

KIMI = {"provider": "moonshot", "model": "kimi-k2", "memory_scope": "research", "timeout_s": 60}


def declare_moonshot(api: Api) -> None:
    """The operator's declaration (settings), which tenants' profiles may name."""
    api.settings.providers = [ProviderSettings(
        name="moonshot", base_url="https://api.moonshot.ai/v1", api_key_env="MOONSHOT_API_KEY",
        models=["kimi-k2"])]


async def test_profiles_are_created_listed_and_isolated_per_tenant(api_no_worker: Api) -> None:
    declare_moonshot(api_no_worker)
    async with api_no_worker.client("acme") as acme, api_no_worker.client("globex") as globex:
        r = await acme.put("/v1/profiles/kimi", json=KIMI)
        assert r.status_code == 200, r.text
        assert r.json()["spec"]["provider"] == "moonshot"
        assert [p["name"] for p in (await acme.get("/v1/profiles")).json()["profiles"]] == ["kimi"]
        assert (await globex.get("/v1/profiles")).json()["profiles"] == []
        assert (await globex.get("/v1/profiles/kimi")).status_code == 404
        run = await globex.post("/v1/runs", json={"task": "hi", "profile": "kimi"})
        assert run.status_code == 404 and run.json()["field"] == "profile"
        mine = await acme.post("/v1/runs", json={"task": "hi", "profile": "kimi"})
        assert mine.status_code == 201, mine.text
        detail = (await acme.get(f"/v1/runs/{mine.json()['run_id']}")).json()
        assert detail["run"]["profile"]["model"] == "kimi-k2"
        assert detail["run"]["profile"]["provider"] == "moonshot"
        assert (await acme.delete("/v1/profiles/kimi")).status_code == 204
        assert (await acme.get("/v1/profiles/kimi")).status_code == 404


async def test_a_bad_profile_is_a_422_naming_the_field(api_no_worker: Api) -> None:
    declare_moonshot(api_no_worker)
    async with api_no_worker.client("acme") as c:
        for body, field in (({**KIMI, "api_key_env": "SECRET_TOKEN"}, "api_key_env"),
                            ({**KIMI, "base_url": "http://169.254.169.254/v1"}, "base_url"),
                            ({**KIMI, "timeout_s": -1}, "timeout_s"),
                            ({**KIMI, "provider": "mine"}, "provider"),
                            ({**KIMI, "model": "gpt-4o"}, "model"),
                            ({"provider": "moonshot"}, "model")):
            r = await c.put("/v1/profiles/p", json=body)
            assert r.status_code == 422 and r.json()["field"] == field, r.text
            assert "Traceback" not in r.text
        assert (await c.put("/v1/profiles/bad name", json=KIMI)).status_code == 422


async def test_a_tenant_sees_the_providers_it_may_name_but_not_their_urls_or_keys(
        api_no_worker: Api) -> None:
    declare_moonshot(api_no_worker)
    async with api_no_worker.client("acme") as c:
        r = await c.get("/v1/providers")
        refused = await c.put("/v1/profiles/p", json={**KIMI, "provider": "nope"})
    assert r.status_code == 200, r.text
    assert {"name": "moonshot", "models": ["kimi-k2"]} in r.json()["providers"]
    assert "moonshot.ai" not in r.text and "MOONSHOT_API_KEY" not in r.text
    assert refused.status_code == 422 and "onebox provider add" in refused.json()["message"]


async def test_unknown_tools_bad_domains_and_missing_environments_are_refused(
        api_no_worker: Api) -> None:
    declare_moonshot(api_no_worker)
    async with api_no_worker.client("acme") as c:
        tools = (await c.get("/v1/tools")).json()["tools"]
        known = tools[0]["name"]
        for body, field, words in (
                ({**KIMI, "tools": [known, "web_serch"]}, "tools",
                 ["'web_serch'", known, "/v1/tools"]),
                ({**KIMI, "allow_domains": ["*"]}, "allow_domains",
                 ["'*'", "*.example.com", "api.example.com"]),
                ({**KIMI, "allow_domains": ["a b"]}, "allow_domains", ["'a b'", ":port"]),
                ({**KIMI, "allow_domains": ["http://x.org/p"]}, "allow_domains", ["x.org"]),
                ({**KIMI, "environment": "nope"}, "environment",
                 ["'nope'", "onebox env build nope", "no environments"])):
            r = await c.put("/v1/profiles/p", json=body)
            assert r.status_code == 422 and r.json()["field"] == field, r.text
            for word in words:
                assert word in r.json()["message"], (word, r.text)
        fine = {**KIMI, "tools": [known], "allow_domains": ["api.example.com", "*.example.org",
                                                            "example.net:8443", "10.0.0.5"]}
        assert (await c.put("/v1/profiles/p", json=fine)).status_code == 200
        assert (await c.get("/v1/profiles/p")).json()["spec"]["allow_domains"][0] == \
            "api.example.com"
