"""Profiles: a run's model work goes only to a worker that serves the run's model."""

from __future__ import annotations

import pytest
from run_helpers import serve_until_ended

from onebox.config import ProviderSettings, Settings
from onebox.errors import NotFound, ProviderError, ValidationError
from onebox.llm.base import Message
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.worker import Worker
from onebox.runtime.models.profiles import (
    model_key,
    parse_profile,
    run_profile,
    save_profile,
    served_models,
)
from onebox.runtime.services import runs as runs_api
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "say hi", "entities": [], "capabilities": ["bash"], "formats": [],
          "risks": [], "fallbacks": []}
PLAN = {"name": "hi", "steps": [{"id": "hi", "tool": "bash", "code": "echo hi"}]}



def with_model(settings: Settings, model: str) -> Settings:
    other = settings.model_copy(deep=True)
    other.llm.model, other.llm.base_url = model, f"http://{model}.invalid/v1"
    return other


async def test_a_task_run_is_never_run_by_another_model(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    a, b = with_model(settings, "model-a"), with_model(settings, "model-b")
    run_id, _ = await submit_task(db, "say hi", settings=b)  # the submitter points at B
    model_a, model_b = ScriptedModel([]), ScriptedModel([INTENT, PLAN])
    workers = [Worker(db, backend, a, model=model_a, name="serves-a"),
               Worker(db, backend, b, model=model_b, name="serves-b")]
    await serve_until_ended(workers, db, run_id)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["profile"]["model"] == "model-b"
    assert model_a.requests == [] and len(model_b.requests) == 2
    started = [e["payload"] for e in await runs_api.run_events(db, run_id)
               if e["type"] == "step_started" and e["payload"]["step_id"].startswith("model:")]
    assert {p["worker"] for p in started} == {"serves-b"}
    calls = await db.fetch("SELECT model FROM onebox.llm_calls WHERE run_id = %s", (run_id,))
    assert len(calls) == 2


MOONSHOT = ProviderSettings(name="moonshot", base_url="https://api.moonshot.ai/v1",
                            api_key_env="ONEBOX_TEST_MOONSHOT_KEY", models=["kimi-k2"])
LOCAL = ProviderSettings(name="local", base_url="http://127.0.0.1:11434/v1")


async def test_a_worker_serves_the_profiles_it_has_keys_for(db: Database,
                                                            settings: Settings) -> None:
    mine = with_model(settings, "own")
    mine.providers = [MOONSHOT, LOCAL]
    async with db.connection() as conn:
        await save_profile(conn, mine, "default", parse_profile({
            "name": "kimi", "provider": "moonshot", "model": "kimi-k2",
            "memory_scope": "research"}))
        await save_profile(conn, mine, "default", parse_profile({
            "name": "local", "provider": "local", "model": "llama3"}))
        without = await served_models(conn, mine, environ={})
        with_key = await served_models(conn, mine, environ={"ONEBOX_TEST_MOONSHOT_KEY": "sk"})
        elsewhere = await served_models(conn, with_model(settings, "own"),
                                        environ={"ONEBOX_TEST_MOONSHOT_KEY": "sk"})
        kept = await run_profile(conn, mine, "default", "kimi")
        with pytest.raises(NotFound, match="onebox profile list"):
            await run_profile(conn, mine, "default", "nope")
        with pytest.raises(NotFound):  # profiles belong to tenants
            await run_profile(conn, mine, "acme", "kimi")
    own = model_key("own", "default")
    assert without == sorted([own, model_key("llama3", "local")])
    assert with_key == sorted([own, model_key("kimi-k2", "moonshot"), model_key("llama3", "local")])
    assert elsewhere == [own], "a worker that has not declared a provider serves none of it"
    assert kept is not None and kept["provider"] == "moonshot"
    assert "base_url" not in kept and "api_key_env" not in kept and "sk" not in str(kept)


async def test_a_profile_names_a_declared_provider_and_one_of_its_models(
        db: Database, settings: Settings) -> None:
    settings.providers = [MOONSHOT]
    async with db.connection() as conn:
        with pytest.raises(ValidationError, match="onebox provider add") as unknown:
            await save_profile(conn, settings, "acme", parse_profile(
                {"name": "p", "provider": "elsewhere", "model": "m"}))
        with pytest.raises(ValidationError, match="kimi-k2") as other_model:
            await save_profile(conn, settings, "acme", parse_profile(
                {"name": "p", "provider": "moonshot", "model": "gpt-4o"}))
    assert unknown.value.field == "provider" and other_model.value.field == "model"


@pytest.mark.parametrize(("data", "field"), [
    ({"name": "bad name", "model": "m"}, "name"),
    ({"name": "ok", "model": ""}, "model"),
    ({"name": "ok", "model": "m", "api_key_env": "SECRET_TOKEN"}, "api_key_env"),
    ({"name": "ok", "model": "m", "base_url": "http://127.0.0.1:8080/v1"}, "base_url"),
    ({"name": "ok", "model": "m", "provider": "../x"}, "provider"),
    ({"name": "ok", "model": "m", "surprise": 1}, "surprise"),
])
def test_a_bad_profile_names_the_field(data: dict, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_profile(data)
    assert caught.value.field == field


def test_a_profile_sets_default_limits_grants_and_tools() -> None:
    from onebox.agent.actions import ToolHint, ToolsResult
    from onebox.agent.plan import parse_plan
    from onebox.runtime.models.profiles import allowed_tools, with_profile_defaults

    profile = {"timeout_s": 60, "memory_mb": 512, "allow_domains": ["api.example.com"],
               "tools": ["python", "csv_stats"]}
    step = parse_plan({"steps": [{"id": "s", "tool": "python", "code": "pass",
                                  "limits": {"memory_mb": 128},
                                  "allow_domains": ["data.example.org"]}]}).steps[0]
    shaped = with_profile_defaults(step, profile)
    assert shaped.limits.timeout_s == 60 and shaped.limits.memory_mb == 128  # the step's wins
    assert shaped.allow_domains == ("data.example.org", "api.example.com")
    found = ToolsResult("a1", tools=(ToolHint("python", "run python"),
                                     ToolHint("http_get", "fetch")),
                        names=("python", "http_get", "csv_stats"))
    seen = allowed_tools(found, profile)
    assert [t.name for t in seen.tools] == ["python"] and seen.names == ("python", "csv_stats")
    assert with_profile_defaults(step, None) is step and allowed_tools(found, None) is found


async def test_a_profiles_instructions_and_memory_scope_reach_the_model_and_memory(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    serving = with_model(settings, "tuned")
    async with db.connection() as conn:
        await save_profile(conn, settings, "default", parse_profile({
            "name": "terse", "model": "tuned",
            "instructions": "Answer in French.", "memory_scope": "notes"}))
    plan = {"name": "r", "steps": [
        {"id": "keep", "kind": "memory_remember", "input": {"text": "the launch is at noon"}}]}
    model = ScriptedModel([INTENT, plan])
    run_id, _ = await submit_task(db, "remember the launch time", settings=settings,
                                  profile="terse")
    await serve_until_ended([Worker(db, backend, serving, model=model)], db, run_id)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert all("Answer in French." in (r.messages[0].content or "") for r in model.requests)
    rows = await db.fetch("SELECT messages FROM onebox.llm_calls WHERE run_id = %s", (run_id,))
    assert all("Answer in French." in r["messages"][0]["content"] for r in rows)
    scopes = await db.fetch("SELECT DISTINCT scope FROM onebox.memories")
    assert [s["scope"] for s in scopes] == ["default/notes"]  # the tenant rule: default/<scope>


async def test_an_unreachable_profile_endpoint_names_the_profile_and_its_provider(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    closed = ProviderSettings(name="lab", base_url="http://127.0.0.1:9/v1")  # nothing listens
    settings.providers, settings.llm.max_retries = [closed], 0
    async with db.connection() as conn:
        await save_profile(conn, settings, "default", parse_profile(
            {"name": "labbot", "provider": "lab", "model": "m"}))
        profile = await run_profile(conn, settings, "default", "labbot")
    worker = Worker(db, backend, settings, name="w")
    await worker._refresh_served()
    with pytest.raises(ProviderError) as down:
        await worker.chat_model(profile).chat([Message.user("hi")])
    message = down.value.message
    assert "profile 'labbot'" in message and "provider 'lab'" in message, message
    assert "http://127.0.0.1:9/v1" in message and "onebox provider add lab" in message
    assert "OPENAI_BASE_URL" not in message
