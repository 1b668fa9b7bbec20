"""The rewording model (e5 read as a cross-encoder, onebox.llm.rewording) and the answer
cache's rule for asking it: only about words left unpaired that hold nothing protected; and
its veto of words paired only as alike (an embedding's cosine, the English sentence model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onebox.errors import ConfigError
from onebox.knowledge.cache import REWORDING_ASKS, AnswerCache
from onebox.knowledge.equivalence import RewordingJudge, SentenceJudge
from onebox.knowledge.guard import different_question
from onebox.llm import rewording
from onebox.llm.e5_weights import load_e5_weights

THRESHOLD, VETO = 0.9, 0.08  # the shipped KNOWLEDGE__CACHE_REWORDING_SIMILARITY / _VETO


class Scripted:
    """A rewording model that answers one score and records what it was asked."""

    def __init__(self, score: float) -> None:
        self.value = score
        self.asked: list[tuple[str, str]] = []

    def judge(self) -> RewordingJudge:
        return RewordingJudge(self.score, THRESHOLD, VETO)

    def score(self, a: str, b: str) -> float:
        self.asked.append((a, b))
        return self.value


@pytest.mark.parametrize(("a", "b"), [
    ("Did Alice call Bob?", "Did Alice call Carol?"),  # a name
    ("What happened yesterday at the summit?", "What happened today at the summit?"),  # time
    ("Is 5 kg too heavy for carry-on luggage?", "Is 5 lb too heavy for carry-on luggage?"),
    ("How much water should I drink every day?", "How much water should I drink every week?"),
    ("Does Anna usually cook dinner?", "Does Anna always cook dinner?"),  # how often
    ("Should I take the train?", "Can I take the train?"),  # a modal
    ("王芳在哪家公司工作？", "李娜在哪家公司工作？"),
    ("北京明天会下雨吗？", "北京后天会下雨吗？"),
    ("周末银行上班吗？", "有的银行周末营业吗？"),  # 有的: some (jieba: 有 / 的)
    ("What should I eat before a marathon?", "What should I eat after a marathon?"),
    ("手机充满电能用多久？", "手机充满电需要多久？"),  # a modal's word: can last / needs
    ("陈静今年还剩几天年假？", "陈静今年已经休了几天年假？"),  # what is left / already taken
])
def test_protected_words_never_reach_the_model(a: str, b: str) -> None:
    model = Scripted(1.0)
    reason = different_question(a, b, rewording=model.judge())
    assert reason is not None and "rewording model" not in reason, reason
    assert model.asked == []


@pytest.mark.parametrize(("a", "b"), [
    ("What kind of muffins did Caroline make for the party?",
     "What kind of muffins did Caroline bake for the party?"),
    ("Which artists did Melanie work with last year?",
     "Which artists did Melanie collaborate with last year?"),
    ("What time does the Louvre open?", "What time does the Louvre open its doors?"),  # one side
])
def test_the_model_reads_the_words_left_at_its_threshold(a: str, b: str) -> None:
    assert different_question(a, b, rewording=Scripted(0.95).judge()) is None
    reason = different_question(a, b, rewording=Scripted(0.5).judge())
    assert reason is not None and reason.startswith("terms differ: "), reason
    assert f"(rewording model 0.500 < {THRESHOLD:.3f})" in reason, reason


@pytest.mark.parametrize(("a", "b", "why"), [
    ("Does Lisa not enjoy jazz?", "Does Lisa like jazz?", "negation differs"),
    ("Did Maria bake the cake?", "Will Maria make the cake?", "tense differs"),
    ("Did James offer John the job?", "Did John offer James the job?", "roles differ"),
])
def test_negation_tense_and_roles_are_compared_after_the_model(a: str, b: str,
                                                               why: str) -> None:
    reason = different_question(a, b, rewording=Scripted(1.0).judge())
    assert reason is not None and reason.startswith(why), reason


@pytest.mark.parametrize(("a", "b"), [
    ("小王家的猫叫什么名字？", "小王家的狗叫什么名字？"),
    ("酒精的沸点是多少度？", "酒精的燃点是多少度？"),
    ("吃什么可以补钙？", "吃什么可以补铁？"),
])
def test_words_only_alike_stand_unless_the_model_is_sure_they_differ(a: str, b: str) -> None:
    def alike(x: str, y: str) -> bool:
        return True  # the embedding's cosine, at its threshold: 0.92-0.94 for these

    assert different_question(a, b, alike) is None  # what the cache served before
    assert different_question(a, b, alike, rewording=Scripted(0.5).judge()) is None
    reason = different_question(a, b, alike, rewording=Scripted(0.03).judge())
    assert reason is not None and "read alike, but the rewording model reads another " \
        f"question: 0.030 < {VETO:.3f}" in reason, reason


def test_an_english_paraphrase_stands_unless_the_model_is_sure_it_differs() -> None:
    a, b = ("What foods should I eat to lower cholesterol?",
            "What foods should I avoid to lower cholesterol?")
    sentences = SentenceJudge(lambda x, y: 0.99, 0.975)
    assert different_question(a, b, sentences=sentences) is None
    reason = different_question(a, b, sentences=sentences, rewording=Scripted(0.03).judge())
    assert reason is not None and "'eat' vs 'avoid'" in reason, reason


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> rewording.RewordingModel:
    return rewording.RewordingModel.open(tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize(("a", "b"), [  # training pairs: what it learned, checked end to end
    ("What kind of muffins did Caroline make for the party?",
     "What kind of muffins did Caroline bake for the party?"),
    ("这种邮票由什么机构发行？", "这种邮票由哪个机构负责发行？"),
])
def test_the_shipped_model_reads_rewordings_as_one_question(
        model: rewording.RewordingModel, a: str, b: str) -> None:
    assert model.score(a, b) >= THRESHOLD
    assert abs(model.score(a, b) - model.score(b, a)) < 1e-6  # both orders, one batch


@pytest.mark.parametrize(("a", "b"), [
    ("酒精的沸点是多少度？", "酒精的燃点是多少度？"),
    ("What foods should I eat to lower cholesterol?",
     "What foods should I avoid to lower cholesterol?"),
    ("How do I send money from the US to India?", "How do I send money from India to the US?"),
])
def test_the_shipped_model_reads_different_questions_apart(
        model: rewording.RewordingModel, a: str, b: str) -> None:
    assert model.score(a, b) < VETO


def test_the_model_is_built_once_per_adapter(model: rewording.RewordingModel,
                                             tmp_path: Path) -> None:
    first = rewording.RewordingModel.open(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.startswith("e5-rewording-int8-") and n.endswith(".onnx") for n in files)
    built = next(tmp_path.glob("e5-rewording-int8-*.onnx")).stat().st_mtime_ns
    again = rewording.RewordingModel.open(tmp_path)
    assert next(tmp_path.glob("e5-rewording-int8-*.onnx")).stat().st_mtime_ns == built
    pair = ("How do I reset my password?", "How can I reset my password?")
    assert first.score(*pair) == pytest.approx(again.score(*pair), abs=1e-6)
    assert first.score(*pair) == pytest.approx(model.score(*pair), abs=1e-6)


def test_a_zero_adapter_leaves_e5_as_it_is() -> None:
    weights = load_e5_weights()
    with np.load(rewording.ADAPTER) as data:
        adapter = {name: data[name] for name in data.files}
    assert {f"l{i}.{p}.{m}" for i in range(12) for p in rewording.PRODUCTS for m in "AB"} <= set(
        adapter)
    zero = {k: (np.zeros_like(v) if k.endswith(".B") else v) for k, v in adapter.items()}
    merged = rewording.merge(weights, zero)
    assert all(np.array_equal(merged.tensors[k], weights.tensors[k]) for k in weights.tensors)
    changed = rewording.merge(weights, adapter)
    assert not np.array_equal(changed.tensors["l0.q.w"], weights.tensors["l0.q.w"])
    assert changed.tensors["l0.q.w"].shape == weights.tensors["l0.q.w"].shape


def test_a_missing_adapter_says_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reinstall onebox"):
        rewording.RewordingModel.open(tmp_path, tmp_path / "nothing.npz")


def test_one_lookup_lets_the_model_accept_only_its_nearest_candidate(tmp_path: Path) -> None:
    """12 ms a run: after the first candidate it read, a lookup keeps only the veto."""
    cache = AnswerCache(None, None, models_dir=tmp_path)  # type: ignore[arg-type]
    asked = [0]
    first = cache.rewording_judge(asked)
    assert first is not None and first.threshold == THRESHOLD and first.veto == VETO
    asked[0] = REWORDING_ASKS
    later = cache.rewording_judge(asked)
    assert later is not None and later.threshold > 1 and later.veto == VETO
    model = Scripted(1.0)
    a, b = ("What kind of muffins did Caroline make for the party?",
            "What kind of muffins did Caroline bake for the party?")
    reason = different_question(a, b, rewording=RewordingJudge(model.score, later.threshold,
                                                               VETO))
    assert reason is not None and model.asked == []  # not asked to accept
    assert AnswerCache(None, None, rewording_similarity=2).rewording_judge() is None  # type: ignore[arg-type]
