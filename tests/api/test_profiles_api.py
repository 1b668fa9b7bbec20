"""/v1/profiles: per tenant, validated field by field, never storing a key."""

from __future__ import annotations

from api_helpers import Api

KIMI = {"model": "kimi-k2", "base_url": "https://api.moonshot.ai/v1",
        "api_key_env": "MOONSHOT_API_KEY", "memory_scope": "research", "timeout_s": 60}


async def test_profiles_are_created_listed_and_isolated_per_tenant(api_no_worker: Api) -> None:
    async with api_no_worker.client("acme") as acme, api_no_worker.client("globex") as globex:
        r = await acme.put("/v1/profiles/kimi", json=KIMI)
        assert r.status_code == 200, r.text
        assert r.json()["spec"]["api_key_env"] == "MOONSHOT_API_KEY"
        assert [p["name"] for p in (await acme.get("/v1/profiles")).json()["profiles"]] == ["kimi"]
        assert (await globex.get("/v1/profiles")).json()["profiles"] == []
        assert (await globex.get("/v1/profiles/kimi")).status_code == 404
        run = await globex.post("/v1/runs", json={"task": "hi", "profile": "kimi"})
        assert run.status_code == 404 and run.json()["field"] == "profile"
        mine = await acme.post("/v1/runs", json={"task": "hi", "profile": "kimi"})
        assert mine.status_code == 201, mine.text
        detail = (await acme.get(f"/v1/runs/{mine.json()['run_id']}")).json()
        assert detail["run"]["profile"]["model"] == "kimi-k2"
        assert (await acme.delete("/v1/profiles/kimi")).status_code == 204
        assert (await acme.get("/v1/profiles/kimi")).status_code == 404


async def test_a_bad_profile_is_a_422_naming_the_field(api_no_worker: Api) -> None:
    async with api_no_worker.client("acme") as c:
        for body, field in (({**KIMI, "api_key_env": "sk-live-secret"}, "api_key_env"),
                            ({**KIMI, "base_url": "file:///etc/passwd"}, "base_url"),
                            ({**KIMI, "timeout_s": -1}, "timeout_s"),
                            ({"base_url": "https://x/v1"}, "model")):
            r = await c.put("/v1/profiles/p", json=body)
            assert r.status_code == 422 and r.json()["field"] == field, r.text
            assert "Traceback" not in r.text
        assert (await c.put("/v1/profiles/bad name", json=KIMI)).status_code == 422
