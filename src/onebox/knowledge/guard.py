"""A contradiction guard for near-duplicate texts (pure; no model).

Embeddings score "X lacks Y" and "X shows Y" at 0.95-0.99 cosine, so similarity
alone cannot tell a re-worded question from its opposite. Two texts are
flagged when they differ in the numbers they mention, in the parity of their
negation cues (``not``, ``lack``, ``without``, ``不``, ``没有``...), or when one
uses a word whose antonym the other uses (``increase``/``decrease``).
"""

from __future__ import annotations

import re

from onebox.knowledge.text import numbers_in

_WORD = re.compile(r"[a-z]+(?:n't|'t)?|[\u4e00-\u9fff]")
NEGATION_WORDS = frozenset({
    "not", "no", "never", "none", "nor", "neither", "nobody", "nothing", "without", "cannot",
    "lack", "lacks", "lacking", "lacked", "absence", "absent", "fail", "fails", "failed",
    "unable", "non", "nonexistent", "unrelated", "unaffected", "ineffective", "insufficient",
    "hardly", "rarely", "refute", "refutes", "deny", "denies", "false",
})
NEGATION_CJK = ("不", "没", "无", "非", "未", "否", "别", "勿")
_ANTONYM_PAIRS = [
    ("increase", "decrease"), ("increase", "reduce"), ("higher", "lower"), ("more", "less"),
    ("more", "fewer"), ("positive", "negative"), ("up", "down"), ("promote", "inhibit"),
    ("promote", "suppress"), ("activate", "inhibit"), ("enhance", "reduce"),
    ("enhance", "impair"), ("improve", "worsen"), ("gain", "loss"), ("above", "below"),
    ("before", "after"), ("present", "absent"), ("show", "lack"), ("high", "low"),
    ("greater", "smaller"), ("larger", "smaller"), ("benefit", "harm"), ("safe", "unsafe"),
    ("effective", "ineffective"), ("upregulate", "downregulate"), ("rise", "fall"),
    ("accelerate", "slow"), ("stimulate", "inhibit"), ("maximum", "minimum"),
    ("most", "least"), ("all", "none"), ("always", "never"), ("true", "false"),
    ("yes", "no"), ("male", "female"), ("men", "women"), ("old", "young"),
    ("older", "younger"), ("early", "late"), ("earlier", "later"), ("first", "last"),
    ("increased", "decreased"), ("increases", "decreases"), ("increasing", "decreasing"),
    ("高", "低"), ("多", "少"), ("大", "小"), ("增", "减"), ("前", "后"), ("上", "下"),
]
ANTONYMS: dict[str, set[str]] = {}
for _a, _b in _ANTONYM_PAIRS:
    ANTONYMS.setdefault(_a, set()).add(_b)
    ANTONYMS.setdefault(_b, set()).add(_a)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def negation_count(text: str) -> int:
    tokens = words(text)
    count = sum(1 for t in tokens if t in NEGATION_WORDS or t.endswith("n't"))
    return count + sum(text.count(ch) for ch in NEGATION_CJK)


def _antonym_clash(a: str, b: str) -> tuple[str, str] | None:
    only_a = set(words(a)) - set(words(b))
    only_b = set(words(b)) - set(words(a))
    stems_b = {_stem(w) for w in only_b} | only_b
    for word in only_a:
        for candidate in (word, _stem(word)):
            clash = ANTONYMS.get(candidate, set()) & stems_b
            if clash:
                return word, sorted(clash)[0]
    return None


def contradiction(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` may say opposite things, or None when no cue is found."""
    if numbers_in(a) != numbers_in(b):
        return f"numbers differ: {sorted(numbers_in(a))} vs {sorted(numbers_in(b))}"
    if negation_count(a) % 2 != negation_count(b) % 2:
        return "negation differs"
    clash = _antonym_clash(a, b)
    if clash:
        return f"opposite words: {clash[0]!r} vs {clash[1]!r}"
    return None
