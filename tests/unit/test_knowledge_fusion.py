"""Fusion, the contradiction guard and CJK segmentation (pure functions)."""

from __future__ import annotations

import pytest

from onebox.knowledge.fusion import fuse, normalise_scores
from onebox.knowledge.guard import contradiction
from onebox.knowledge.text import segment_for_fts, split_sentences


@pytest.mark.parametrize("method", ["rrf", "score"])
def test_single_candidate_is_a_full_match(method: str) -> None:
    [only] = fuse({"fulltext": [("a", 3.2)], "vector": [("a", 0.81)]},
                  {"fulltext": 0.3, "vector": 0.7}, method)  # type: ignore[arg-type]
    assert only.score == pytest.approx(1.0)


def test_ties_normalise_to_one_not_zero() -> None:
    assert normalise_scores([("a", 0.5), ("b", 0.5)]) == {"a": 1.0, "b": 1.0}


def test_weights_decide_between_retrievers() -> None:
    lists = {"fulltext": [("a", 9.0), ("b", 1.0)], "vector": [("b", 0.9), ("a", 0.8)]}
    assert fuse(lists, {"fulltext": 0.8, "vector": 0.2})[0].id == "a"
    assert fuse(lists, {"fulltext": 0.2, "vector": 0.8})[0].id == "b"
    fused = fuse(lists, {"fulltext": 0.0, "vector": 1.0})
    assert fused[0].raw == {"vector": 0.9, "fulltext": 1.0}  # raw scores kept for display


@pytest.mark.parametrize(("a", "b"), [
    ("0-dimensional biomaterials lack inductive properties.",
     "0-dimensional biomaterials show inductive properties."),
    ("Aspirin increases bleeding risk.", "Aspirin decreases bleeding risk."),
    ("1 in 5 million have it.", "1 in 2 million have it."),
    ("Statins are not effective here.", "Statins are effective here."),
    ("他会来。", "他不会来。"),
    ("Active Ly49Q induces neutrophil polarization.", "Active Ly49Q prevents neutrophil polarization."),
    ("Algerian physicians are the largest group.", "Nigerian physicians are the largest group."),
    ("Ca2+ cycling is a UCP1-dependent mechanism.", "Ca2+ cycling is a UCP1-independent mechanism."),
    ("Ethanol stress lowers the expression of PSP.", "Ethanol stress reduces the expression of SRL."),
    ("Therapy A is more effective than therapy B.", "Therapy B is more effective than therapy A."),
    ("Having a partner improves outcomes.", "Having a partner worsens outcomes."),
])
def test_guard_flags_opposites(a: str, b: str) -> None:
    assert contradiction(a, b) is not None


@pytest.mark.parametrize(("a", "b"), [
    ("What port does the server use?", "Which port is the server listening on?"),
    ("Who wrote the novel War and Peace?", "Who is the author of the novel War and Peace?"),
    ("What is the boiling point of water at sea level?",
     "At sea level, what is the boiling point of water?"),
    ("Ana's office is in room 12.", "The office of Ana is room 12."),
])
def test_guard_accepts_rewording(a: str, b: str) -> None:
    assert contradiction(a, b) is None


def test_cjk_bigrams_and_sentences() -> None:
    assert segment_for_fts("人民银行").split() == ["人民", "民银", "银行"]
    assert split_sentences("第一句。第二句！Third one. Fourth") == [
        "第一句。", "第二句！", "Third one.", "Fourth"]
