"""Model providers: the endpoints and keys the operator declares, and which one a profile uses.

A provider is the operator's: a name, an OpenAI-compatible base URL, the *name* of the
environment variable that holds its key on the workers, and optionally the models tenants
may choose there. Declared in settings (``ONEBOX_PROVIDERS``) or with ``onebox provider add``
(a row of ``onebox.providers``; no API route writes it). The process's own ``llm.*`` settings
are the provider ``default``. A tenant's profile names a provider and a model, never a URL
or a variable, so nothing a tenant stores makes a worker send a key, or a request, anywhere
the operator did not declare.

Profiles stored before providers existed hold a ``base_url``/``api_key_env``; they keep
working where a declared provider has the same URL and key variable, and are refused at run
submission where none does. A run already kept that way is resolved by the worker the same
way, and fails with that message where nothing matches; no key is sent for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError as PydanticError

from onebox.config import ProviderSettings, Settings
from onebox.errors import NotFound, ValidationError
from onebox.store import profiles as rows
from onebox.store.runs import Conn

DEFAULT = "default"
HOW_TO_ADD = ("the operator declares providers: `onebox provider add NAME --base-url URL "
              "--api-key-env VAR [--model M]...` on the host, or ONEBOX_PROVIDERS")


@dataclass(frozen=True)
class Provider:
    """One declared endpoint; ``api_key_env`` None: the key is the process's own (default)
    or none is needed."""

    name: str
    base_url: str | None
    api_key_env: str | None
    models: tuple[str, ...] = ()

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    def public(self) -> dict[str, Any]:
        """What a tenant may see: the name and the models, not the URL or the variable."""
        return {"name": self.name, "models": list(self.models)}


def from_settings(spec: ProviderSettings) -> Provider:
    return Provider(spec.name, spec.base_url.rstrip("/"), spec.api_key_env, tuple(spec.models))


def parse_provider(data: Mapping[str, Any]) -> ProviderSettings:
    """A provider declaration, or a ValidationError naming the first bad field."""
    try:
        return ProviderSettings.model_validate(dict(data))
    except PydanticError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or "provider"
        raise ValidationError(f"provider field {field!r}: {error['msg']}", field=field) from None


async def declared(conn: Conn, settings: Settings) -> dict[str, Provider]:
    """Every provider this process knows: ``default``, the settings' and the stored ones
    (the settings win over a stored one of the same name)."""
    found = {DEFAULT: Provider(DEFAULT, (settings.llm.base_url or "").rstrip("/") or None, None)}
    for spec in await rows.provider_specs(conn):
        provider = from_settings(ProviderSettings.model_validate(spec))
        found.setdefault(provider.name, provider)
    for declared_here in settings.providers:
        found[declared_here.name] = from_settings(declared_here)
    return found


def choose(providers: Mapping[str, Provider], name: str | None, model: str) -> Provider:
    """The provider a profile names (``default`` when it names none), checked for its model."""
    provider = providers.get(name or DEFAULT)
    if provider is None:
        names = ", ".join(sorted(providers))
        raise ValidationError(f"provider {name!r} is not declared here (declared: {names}); "
                              f"{HOW_TO_ADD}", field="provider")
    if not provider.allows(model):
        raise ValidationError(f"model {model!r} is not offered by provider {provider.name!r} "
                              f"(it offers: {', '.join(provider.models)})", field="model")
    return provider


def resolve(providers: Mapping[str, Provider], spec: Mapping[str, Any]) -> Provider:
    """The provider of a stored profile: the one it names, or, for a profile stored with a
    URL and a key variable, the declared provider with the same two."""
    if spec.get("provider") or not (spec.get("base_url") or spec.get("api_key_env")):
        return choose(providers, spec.get("provider"), spec["model"])
    url, env = (spec.get("base_url") or "").rstrip("/") or None, spec.get("api_key_env")
    for provider in providers.values():
        if provider.base_url == url and provider.api_key_env == env:
            return choose(providers, provider.name, spec["model"])
    raise ValidationError(
        f"profile {spec.get('name')!r} was stored with its own endpoint and key variable, "
        f"which no declared provider matches; {HOW_TO_ADD} (with that URL and variable), or "
        "recreate the profile naming a provider", field="profile")


def provider_of(profile: Mapping[str, Any]) -> str:
    """The provider part of the key a run's model calls are queued with. A run kept before
    providers existed, with its own endpoint, keeps the key it was queued with then (its
    endpoint): a worker serves it only after resolving it against its declarations."""
    if profile.get("provider"):
        return str(profile["provider"])
    if profile.get("base_url") or profile.get("api_key_env"):
        return str(profile.get("base_url") or "").rstrip("/")
    return DEFAULT


async def add_provider(conn: Conn, spec: ProviderSettings) -> dict[str, Any]:
    row = await rows.upsert_provider(conn, spec.name, spec.model_dump())
    return {"name": row["name"], "spec": row["spec"]}


async def remove_provider(conn: Conn, name: str) -> None:
    if not await rows.delete_provider(conn, name):
        raise NotFound(f"provider {name!r} is not stored (`onebox provider list`; providers "
                       "of ONEBOX_PROVIDERS are removed from the settings)", field="name")
