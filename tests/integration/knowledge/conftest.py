"""Fixtures for knowledge and memory tests (e5_model and knowledge: tests/integration/conftest.py)."""

from __future__ import annotations

import pytest
from knowledge_fakes import HashEmbeddingModel

from onebox.knowledge.service import Knowledge
from onebox.store.db import Database


@pytest.fixture
def hash_knowledge(db: Database) -> Knowledge:
    return Knowledge.build(db, HashEmbeddingModel())
