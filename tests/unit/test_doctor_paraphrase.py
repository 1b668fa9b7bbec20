"""`onebox doctor` says whether the answer cache's English paraphrase model and its rewording
model are there, off, or missing (then with the fix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onebox.config import load_settings
from onebox.llm import minilm, rewording
from onebox.runtime.services.doctor import check_paraphrase_model, check_rewording_model


def test_installed_off_and_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(home=tmp_path)
    if minilm.model_dir() is not None:
        found = check_paraphrase_model(settings)
        assert found.ok and "all-MiniLM-L6-v2" in found.detail
    monkeypatch.setenv("ONEBOX_KNOWLEDGE__CACHE_PARAPHRASE_SIMILARITY", "2")
    off = check_paraphrase_model(load_settings(home=tmp_path))
    assert off.ok and "turned off" in off.detail
    monkeypatch.delenv("ONEBOX_KNOWLEDGE__CACHE_PARAPHRASE_SIMILARITY")
    monkeypatch.setattr(minilm, "model_dir", lambda: None)
    missing = check_paraphrase_model(settings)
    assert not missing.ok and missing.fix == minilm.INSTALL


def test_the_rewording_model_is_there_off_or_missing(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEBOX_EMBEDDING__MODELS_DIR", str(tmp_path / "models"))
    settings = load_settings(home=tmp_path)
    found = check_rewording_model(settings)
    assert found.ok and "built at first use" in found.detail
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "e5-rewording-int8-0123-v1.onnx").write_bytes(b"")
    assert "built (e5-rewording-int8-0123-v1.onnx)" in check_rewording_model(settings).detail
    monkeypatch.setenv("ONEBOX_KNOWLEDGE__CACHE_REWORDING_SIMILARITY", "2")
    off = check_rewording_model(load_settings(home=tmp_path))
    assert off.ok and "turned off" in off.detail
    monkeypatch.delenv("ONEBOX_KNOWLEDGE__CACHE_REWORDING_SIMILARITY")
    monkeypatch.setattr(rewording, "ADAPTER", tmp_path / "gone.npz")
    missing = check_rewording_model(settings)
    assert not missing.ok and "reinstall onebox" in (missing.fix or "")
