"""Any OpenAI-compatible ``/v1/embeddings`` endpoint, through the official ``openai`` package.

``ONEBOX_EMBEDDING__MODEL=openai:text-embedding-3-small`` with
``ONEBOX_EMBEDDING__BASE_URL`` (or ``OPENAI_BASE_URL``) and ``OPENAI_API_KEY``.
The endpoint is asked for ``embedding.dim`` dimensions; a server that returns
another size is refused, because stored vectors are ``vector(384)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai

from onebox.config import Settings
from onebox.errors import ConfigError, ProviderError, ProviderTimeout, RateLimited
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector


class OpenAIEmbeddingModel(EmbeddingModel):
    """Embeddings from an OpenAI-compatible server. Queries and passages share one mode."""

    max_batch = 64

    def __init__(self, client: Any, model: str, dim: int, send_dimensions: bool = True) -> None:
        self._client = client
        self._model = model
        self.name = f"openai/{model}"
        self.dim = dim
        self._send_dimensions = send_dimensions

    @classmethod
    def from_settings(cls, settings: Settings, model: str | None) -> OpenAIEmbeddingModel:
        if not model:
            raise ConfigError(
                "embedding.model 'openai' needs a model name. "
                "Fix: ONEBOX_EMBEDDING__MODEL=openai:text-embedding-3-small",
                field="embedding.model",
            )
        base_url = settings.embedding.base_url or settings.llm.base_url
        api_key = settings.llm.api_key.get_secret_value() if settings.llm.api_key else "unused"
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key,
            timeout=settings.llm.timeout_s, max_retries=settings.llm.max_retries,
        )
        return cls(client, model, settings.embedding.dim)

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        if not texts:
            return []
        kwargs: dict[str, Any] = {"model": self._model, "input": list(texts)}
        if self._send_dimensions:
            kwargs["dimensions"] = self.dim
        try:
            response = await self._client.embeddings.create(**kwargs)
        except openai.RateLimitError as exc:
            raise RateLimited(f"embedding endpoint rate-limited model {self._model}") from exc
        except openai.APITimeoutError as exc:
            raise ProviderTimeout(f"embedding endpoint timed out for {self._model}") from exc
        except openai.APIError as exc:
            raise ProviderError(f"embedding endpoint failed for {self._model}: {exc}") from exc
        rows = sorted(response.data, key=lambda item: item.index)
        vectors = [list(item.embedding) for item in rows]
        for vector in vectors:
            if len(vector) != self.dim:
                raise ProviderError(
                    f"{self._model} returned {len(vector)}-d vectors, expected {self.dim}. "
                    "Fix: choose a model that supports `dimensions`, or set embedding.dim."
                )
        return vectors

    async def close(self) -> None:
        await self._client.close()
