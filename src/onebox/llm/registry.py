"""Pick the chat model from settings: ``"openai:<model>"`` or a plain model name.

    model = chat_model_from_settings(settings.llm)

A plain name uses the ``openai`` provider (any OpenAI-compatible endpoint).
Other providers register a factory with :func:`register_provider`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from onebox.config import LLMSettings
from onebox.errors import ConfigError
from onebox.llm.base import ChatModel, ModelPrice

ProviderFactory = Callable[[str, LLMSettings], ChatModel]

NOT_CONFIGURED = (
    "no chat model is configured. Set ONEBOX_LLM__MODEL to the model name "
    "(e.g. 'openai:gpt-4o-mini', 'kimi-k2.6', 'deepseek-chat'), OPENAI_BASE_URL to the "
    "endpoint's OpenAI-compatible URL (e.g. https://api.moonshot.ai/v1, "
    "http://127.0.0.1:11434/v1 for Ollama; leave unset for api.openai.com) and "
    "OPENAI_API_KEY to its API key."
)


def _openai_factory(model: str, settings: LLMSettings) -> ChatModel:
    from onebox.llm.openai import OpenAIChatModel  # the SDK takes ~0.5 s to import: only when used

    key = settings.api_key.get_secret_value() if settings.api_key else None
    if key is None and settings.base_url is None:
        raise ConfigError(
            f"model {model!r} would use api.openai.com, but OPENAI_API_KEY is not set. "
            "Set OPENAI_API_KEY, or OPENAI_BASE_URL for a local endpoint that needs no key."
        )
    return OpenAIChatModel(
        model, base_url=settings.base_url, api_key=key,
        timeout_s=settings.timeout_s, max_retries=settings.max_retries,
    )


_PROVIDERS: dict[str, ProviderFactory] = {"openai": _openai_factory}


def register_provider(name: str, factory: ProviderFactory) -> None:
    """Make ``"<name>:<model>"`` resolve through ``factory(model, settings)``."""
    _PROVIDERS[name] = factory


def providers() -> list[str]:
    return sorted(_PROVIDERS)


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``"openai:gpt-4o"`` -> ("openai", "gpt-4o"); a plain name -> ("openai", name).

    Only a known provider prefix is split off, so names that contain a colon
    themselves (``"qwen2.5:7b"`` on Ollama) are kept whole.
    """
    provider, sep, rest = spec.partition(":")
    if sep and provider in _PROVIDERS:
        if not rest:
            raise ConfigError(f"ONEBOX_LLM__MODEL={spec!r} names no model after '{provider}:'")
        return provider, rest
    return "openai", spec


def chat_model_from_settings(settings: LLMSettings) -> ChatModel:
    """The configured chat model, or a ConfigError saying exactly what to set."""
    if not settings.model or not settings.model.strip():
        raise ConfigError(NOT_CONFIGURED, field="llm.model")
    provider, model = parse_model_spec(settings.model.strip())
    return _PROVIDERS[provider](model, settings)


def price_table(settings: LLMSettings) -> Mapping[str, ModelPrice]:
    """The configured prices as :class:`ModelPrice` values, keyed by model name."""
    return {
        name: ModelPrice(p.input_per_mtok, p.output_per_mtok) for name, p in settings.prices.items()
    }
