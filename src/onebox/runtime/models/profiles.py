"""Agent profiles: which model does a run's model work, and with which defaults.

A profile names a provider the operator declared (:mod:`onebox.runtime.models.providers`; never a
URL or an environment variable: those are the operator's) and a model there, the memory
scope the agent remembers into, the tools it may use, and default sandbox limits and network
grants for its steps. Profiles are stored per tenant::

    onebox profile create kimi --provider moonshot --model kimi-k2 --memory-scope research

A run keeps a copy of the profile it was submitted with (``runs.profile``); a run submitted
without one gets the submitter's own model settings as its profile. Each model call of the
run is queued with the model it needs (``task_execution.needs_model``, ``model@provider``),
and only a worker that serves that model claims it: a worker serves its own configured model
and every stored profile whose provider it has declared, with the provider's key variable
set in its environment. So a run is never
silently performed by another model; it waits for a worker that has it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from onebox.agent.actions import ToolsResult
from onebox.agent.plan import Step
from onebox.config import LLMSettings, Settings
from onebox.domains import DomainRule
from onebox.errors import ConfigError, NotFound, PolicyViolation
from onebox.errors import ValidationError as OneboxValidationError
from onebox.llm.base import ChatRequest, EndpointHints, Message
from onebox.runtime.models import providers as declared_providers
from onebox.runtime.models.providers import DEFAULT, HOW_TO_ADD, Provider, provider_of
from onebox.store import catalog
from onebox.store import profiles as rows
from onebox.store.runs import Conn
from onebox.suggest import did_you_mean

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,127}$"


class Profile(BaseModel):
    """A stored profile; every field is validated before anything is written."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)
    model: str = Field(min_length=1, max_length=200)
    provider: str | None = Field(None, pattern=NAME)  # an operator-declared one; None: default
    instructions: str | None = Field(None, max_length=20_000)
    memory_scope: str | None = Field(None, pattern=NAME)
    tools: list[str] | None = Field(None, max_length=200)
    timeout_s: float | None = Field(None, gt=0, le=86_400)
    memory_mb: int | None = Field(None, gt=0, le=1_048_576)
    allow_domains: list[str] = Field(default_factory=list, max_length=100)
    environment: str | None = Field(None, pattern=NAME)  # a built environment its steps use
    context_tokens: int | None = Field(None, ge=200, le=1_000_000)  # a thread turn's budget
    context_turns: int | None = Field(None, ge=0, le=50)  # a thread turn's verbatim turns
    context_memory_share: float | None = Field(None, ge=0.05, le=0.9)  # of the budget, memories

    @property
    def key(self) -> str:
        return model_key(self.model, self.provider or DEFAULT)


def model_key(model: str, provider: str) -> str:
    """What a worker must serve to perform a model call: the model at its provider."""
    return f"{model}@{provider}"


OPERATOR_FIELDS = ("base_url", "api_key_env")  # what only a provider declaration may hold


def parse_profile(data: Mapping[str, Any]) -> Profile:
    """A Profile, or a ValidationError naming the first bad field and what it accepts."""
    for field in OPERATOR_FIELDS:
        if data.get(field) is not None:
            raise OneboxValidationError(
                f"profile field {field!r}: a profile names a provider ('provider') and a "
                f"model, never an endpoint or a key variable; {HOW_TO_ADD}", field=field)
    try:
        profile = Profile.model_validate(dict(data))
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or "profile"
        raise OneboxValidationError(f"profile field {field!r}: {error['msg']}",
                                    field=field) from None
    for domain in profile.allow_domains:
        try:
            DomainRule.parse(domain, field="allow_domains")
        except PolicyViolation as exc:
            raise OneboxValidationError(f"profile field 'allow_domains': {exc.message}",
                                        field="allow_domains") from None
    return profile


async def save_profile(conn: Conn, settings: Settings, tenant_id: str,
                       profile: Profile) -> dict[str, Any]:
    """Store the profile once its provider is declared and offers its model, and the tools
    and environment it names exist."""
    declared_providers.choose(await declared_providers.declared(conn, settings),
                              profile.provider, profile.model)
    await _check_tools(conn, profile.tools or [])
    if profile.environment is not None:
        await _check_environment(conn, tenant_id, profile.environment)
    return _public(await rows.upsert(conn, tenant_id, profile.name, profile.model_dump()))


async def _check_tools(conn: Conn, tools: list[str]) -> None:
    if not tools:
        return
    names = sorted({t.name for t in await catalog.list_tools(conn)})
    for tool in tools:
        if tool not in names:
            raise OneboxValidationError(
                f"profile field 'tools': no tool named {tool!r} in the catalog"
                f"{did_you_mean(tool, names)}; the tools are {', '.join(names)} "
                "(`onebox tools list`, GET /v1/tools)", field="tools")


async def _check_environment(conn: Conn, tenant_id: str, name: str) -> None:
    existing = await rows.environment_names(conn, tenant_id)
    if name in existing:
        return
    listed = (f"the environments are {', '.join(existing)}" if existing
              else "there are no environments yet")
    raise OneboxValidationError(
        f"profile field 'environment': environment {name!r} does not exist; {listed}; "
        f"`onebox env build {name} --package P` (or POST /v1/environments) builds it",
        field="environment")


async def get_profile(conn: Conn, tenant_id: str, name: str) -> dict[str, Any]:
    row = await rows.get(conn, tenant_id, name)
    if row is None:
        raise NotFound(f"profile {name!r} does not exist; `onebox profile list` shows the "
                       "profiles, `onebox profile create` makes one", field="profile")
    return _public(row)


async def list_profiles(conn: Conn, tenant_id: str) -> list[dict[str, Any]]:
    return [_public(r) for r in await rows.of_tenant(conn, tenant_id)]


async def delete_profile(conn: Conn, tenant_id: str, name: str) -> None:
    if not await rows.delete(conn, tenant_id, name):
        raise NotFound(f"profile {name!r} does not exist", field="profile")


async def run_profile(conn: Conn, settings: Settings | None, tenant_id: str,
                      name: str | None) -> dict[str, Any] | None:
    """The profile a new run keeps: the named one, else the submitter's own model (None
    when it has none: such a run's model work is taken by any worker with a model)."""
    if name is not None:
        spec = dict((await get_profile(conn, tenant_id, name))["spec"])
        if settings is None:
            return spec
        provider = declared_providers.resolve(
            await declared_providers.declared(conn, settings), spec)
        kept = {k: v for k, v in spec.items() if k not in OPERATOR_FIELDS}
        return {**kept, "provider": provider.name}
    if settings is None or not settings.llm.model:
        return None
    return {"name": None, "provider": DEFAULT, "model": settings.llm.model}


def needs_model(profile: Mapping[str, Any] | None) -> str | None:
    return None if not profile else model_key(profile["model"], provider_of(profile))


async def served_models(conn: Conn, settings: Settings,
                        environ: Mapping[str, str] = os.environ, *,
                        providers: Mapping[str, Provider] | None = None) -> list[str]:
    """The models this worker can call: its own, and every stored profile whose provider is
    declared here with its key variable set (or needing none). Model calls of runs kept with
    their own endpoint (before providers) are served where a declaration matches them with
    its key here, and where none matches at all: the worker then fails them, sending
    nothing. ``providers``: the declarations when the caller has just read them."""
    if providers is None:
        providers = await declared_providers.declared(conn, settings)
    served = [model_key(settings.llm.model, DEFAULT)] if settings.llm.model else []
    for spec in await rows.all_specs(conn):
        try:
            provider = declared_providers.resolve(providers, spec)
        except OneboxValidationError:
            continue  # names no provider declared here: another worker's, or nobody's
        if _has_key(provider, environ):
            served.append(model_key(spec["model"], provider.name))
    for key, kept in await rows.kept_without_provider(conn):
        try:
            provider = declared_providers.resolve(providers, kept)
        except OneboxValidationError:
            served.append(key)  # nothing declared matches: claimed to be failed clearly
            continue
        if _has_key(provider, environ):
            served.append(key)
    return sorted(set(served))


def _has_key(provider: Provider, environ: Mapping[str, str]) -> bool:
    return provider.api_key_env is None or bool(environ.get(provider.api_key_env))


def llm_settings_for(profile: Mapping[str, Any], own: LLMSettings,
                     providers: Mapping[str, Provider],
                     environ: Mapping[str, str] = os.environ) -> LLMSettings:
    """The chat model settings for a profile's calls: the endpoint and key of the provider
    the operator declared under the name the profile keeps (or, for a run kept before
    providers, the declared one with its URL and variable), never anything the profile
    itself holds. None declared: a ConfigError the run fails with (retrying cannot help)."""
    try:
        provider = declared_providers.resolve(providers, profile)
    except OneboxValidationError as exc:
        raise ConfigError(exc.message, field=exc.field) from None
    if provider.name == DEFAULT:
        return own if profile["model"] == own.model else own.model_copy(
            update={"model": profile["model"]})
    env = provider.api_key_env
    key = environ.get(env) if env else None
    return own.model_copy(update={"model": profile["model"], "base_url": provider.base_url,
                                  "api_key": SecretStr(key) if key else None})


def endpoint_hints(profile: Mapping[str, Any], providers: Mapping[str, Provider]) -> EndpointHints:
    """What to change when a profile's endpoint fails: the declared provider it names (its
    URL and key variable are the operator's, set with `onebox provider add`), or the
    process's own settings for the default provider."""
    try:
        provider = declared_providers.resolve(providers, profile)
    except OneboxValidationError:
        return EndpointHints()
    if provider.name == DEFAULT:
        return EndpointHints()
    name = profile.get("name")
    who = (f"profile {name!r} uses provider {provider.name!r}" if name
           else f"this run's profile uses provider {provider.name!r}")
    change = (f"the operator changes it with `onebox provider add {provider.name} --base-url "
              f"URL` (`onebox provider list` shows it), or the profile is pointed at another "
              f"provider with `onebox profile create {name or 'NAME'} --provider P --model M`")
    key = provider.api_key_env or "its key variable"
    return EndpointHints(
        endpoint=f"{who} at {provider.base_url}: check that endpoint is up; {change}",
        model=f"{who} at {provider.base_url}: check the model name and that the URL ends "
              f"in /v1; {change}",
        key=f"{who}: set {key} to a valid key for {provider.base_url} in the worker's "
            f"environment")


def allowed_tools(found: ToolsResult, profile: Mapping[str, Any] | None) -> ToolsResult:
    """The catalog answer the agent sees: only the profile's tools, when it names some."""
    allowed = (profile or {}).get("tools")
    if not allowed:
        return found
    return dataclasses.replace(found, tools=tuple(t for t in found.tools if t.name in allowed),
                               names=tuple(n for n in found.names if n in allowed))


def with_instructions(request: ChatRequest, profile: Mapping[str, Any] | None) -> ChatRequest:
    """The model request with the profile's instructions added to its system prompt (the
    request as sent is what ``llm_calls`` records)."""
    extra = ((profile or {}).get("instructions") or "").strip()
    if not extra:
        return request
    messages = list(request.messages)
    if messages and messages[0].role == "system":
        messages[0] = Message.system(f"{messages[0].content or ''}\n\n{extra}".strip())
    else:
        messages.insert(0, Message.system(extra))
    return dataclasses.replace(request, messages=tuple(messages))


def with_profile_defaults(step: Step, profile: Mapping[str, Any] | None) -> Step:
    """The step with the profile's default limits where it sets none, and the profile's
    network grants added to its own."""
    if not profile:
        return step
    limits = {k: profile[k] for k in ("timeout_s", "memory_mb")
              if profile.get(k) is not None and getattr(step.limits, k) is None}
    domains = tuple(dict.fromkeys((*step.allow_domains, *(profile.get("allow_domains") or ()))))
    environment = step.environment or profile.get("environment")
    return step.model_copy(update={"limits": step.limits.model_copy(update=limits),
                                   "allow_domains": domains, "environment": environment})


def _public(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": row["name"], "spec": row["spec"], "created_at": row["created_at"],
            "updated_at": row["updated_at"]}
