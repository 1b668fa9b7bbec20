"""An optional model check of a cache hit the guard accepted but the vectors call borderline.

    verifier = CacheVerifier(db, model, below_similarity=0.97)
    ok = await verifier.confirm("Who founded the firm?", "Who founded the company?", 0.95)

Off unless ``knowledge.cache_verify`` is set and a chat model is configured. Each
call is an ``llm_calls`` row (purpose ``cache_verify``, no run), like every model
call; a failed call, or any reply but "yes", counts as a miss: the question is
answered afresh rather than risk a wrong cached answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from onebox.agent.prompting import prompt
from onebox.errors import OneboxError
from onebox.llm.base import ChatModel, ChatRequest, ChatResponse, Message, ModelPrice
from onebox.model_calls import record_llm_call
from onebox.store.db import Database

log = logging.getLogger(__name__)
PURPOSE = "cache_verify"


class CacheVerifier:
    def __init__(self, db: Database, model: ChatModel, below_similarity: float = 0.97,
                 prices: Mapping[str, ModelPrice] | None = None) -> None:
        self.db = db
        self.model = model
        self.below_similarity = below_similarity
        self.prices = prices

    def wanted(self, similarity: float) -> bool:
        """Only hits below ``below_similarity`` cosine are borderline enough to check."""
        return similarity < self.below_similarity

    async def confirm(self, stored: str, asked: str, similarity: float) -> bool:
        if not self.wanted(similarity):
            return True
        request = verify_request(stored, asked)
        started = time.perf_counter()
        try:
            response = await self.model.complete(request)
        except OneboxError as exc:
            await self._record(request, None, started, f"{exc.code}: {exc.message}")
            log.warning("cache verification failed (%s); treating it as a miss", exc.code)
            return False
        await self._record(request, response, started, None)
        return said_yes(response.message.content)

    async def _record(self, request: ChatRequest, response: ChatResponse | None,
                      started: float, error: str | None) -> None:
        async with self.db.transaction() as conn:
            await record_llm_call(
                conn, run_id=None, model=self.model.name, request=request, response=response,
                prices=self.prices, purpose=PURPOSE, error=error,
                latency_ms=(time.perf_counter() - started) * 1000)


def verify_request(stored: str, asked: str) -> ChatRequest:
    text = prompt("cache_verify").substitute(stored=stored, asked=asked)
    return ChatRequest(messages=(Message.user(text),), temperature=0.0, max_tokens=3)


def said_yes(reply: str | None) -> bool:
    words = (reply or "").strip().lower().split()
    return bool(words) and words[0].strip(".!,") in {"yes", "是", "是的"}
