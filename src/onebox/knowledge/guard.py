"""A contradiction guard for near-duplicate texts (pure; no model).

Embeddings score "X lacks Y" and "X shows Y" at 0.95-0.99 cosine, so similarity
alone cannot tell a re-worded question from its opposite or from the same
question about something else. Two texts are flagged when

- the numbers they mention differ;
- the parity of their negation cues differs (``not``, ``lack``, ``without``,
  ``不``, ``没有``...), or one word is the other with a negating prefix
  (``dependent``/``independent``);
- their direction or valence words disagree (``increases``/``reduces``,
  ``improves``/``worsens``, ``positively``/``negatively``);
- they are the same sentence with one short slot swapped between two content
  words (``Algerian``/``Nigerian`` physicians, ``IBP``/``PSP`` expression);
- they compare the same things in a different order ("A is better than B" /
  "B is better than A").

The guard is deliberately conservative: a miss costs one recomputation, a false
hit serves a wrong answer.
"""

from __future__ import annotations

import difflib
import re

from onebox.knowledge.equivalence import (
    Judge,
    RewordingJudge,
    SentenceJudge,
    canonical,
    reconcile,
    strict_difference,
)
from onebox.knowledge.question import normalise, parse_question, possessors_differ, roles_differ
from onebox.knowledge.text import numbers_in


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_TOKEN = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?|[\u4e00-\u9fff]")
NEGATION_WORDS = frozenset({
    "not", "no", "never", "none", "nor", "neither", "nobody", "nothing", "without", "cannot",
    "lack", "lacks", "lacking", "lacked", "absence", "absent", "fail", "fails", "failed",
    "unable", "non", "nonexistent", "unrelated", "unaffected", "insufficient", "hardly",
    "rarely", "refute", "refutes", "deny", "denies", "false",
})
NEGATION_CJK = ("不", "没", "无", "非", "未", "否", "别", "勿")
_UP = _words("increas rais enhanc promot induc activat stimulat accelerat upregulat elevat "
       "boost augment amplif facilitat trigger positiv higher more greater larger longer "
       "gain rise rises rose exacerbat worsen aggravat strengthen extend stronger high")
_DOWN = _words("decreas reduc lower diminish suppress inhibit prevent impair repress antagoniz "
         "attenuat block downregulat negativ less fewer smaller shorter alleviat mitigat "
         "abolish abrogat limit restrict hinder slow declin drop loss weaken shrink weaker "
         "protect low")
_GOOD = _words("improv better benefit beneficial effective safe help success good")
_BAD = _words("worsen worse harm harmful ineffective unsafe hurt failure damag poor")
_FRAGILE = _words("vulnerab susceptib sensitiv prone")
_ROBUST = _words("resist immun toleran protect")
_ENTITY = re.compile(r"\b(?:[A-Z][A-Za-z]*[A-Z0-9][A-Za-z0-9]*|[A-Za-z]+[0-9][A-Za-z0-9]*|[A-Z][a-z]+)\b")
_COMPARATIVE = frozenset({"than", "over", "versus", "vs", "compared", "relative"})
_NEG_PREFIX = re.compile(r"^(un|in|im|ir|il|non|dis|anti)(.{4,})$")
STOPWORDS = frozenset(_words("""a an the is are was were be been being do does did done can could
will would shall should may might must have has had of in on at to for from by with as and
or but if then so that this these those it its it's what what's which who whom whose when
where why how i me my we our you your he she they them their there here some any each
about into onto upon i'm i've you're get got"""))


def tokens(text: str) -> list[str]:
    return [t.replace("’", "'") for t in _TOKEN.findall(text.lower())]


def stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ing", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _axis(words: list[str], up: tuple[str, ...], down: tuple[str, ...]) -> int:
    score = 0
    for word in words:
        score += any(word.startswith(p) for p in up) - any(word.startswith(p) for p in down)
    return score


def negation_count(text: str) -> int:
    count = sum(1 for t in tokens(text) if t in NEGATION_WORDS or t.endswith("n't"))
    return count + sum(text.count(ch) for ch in NEGATION_CJK)


def _prefix_negated(only_a: set[str], only_b: set[str]) -> str | None:
    for x, y in ((a, b) for a in only_a for b in only_b):
        for p, q in ((x, y), (y, x)):
            match = _NEG_PREFIX.match(p)
            if match and stem(match.group(2)) == stem(q):
                return f"{p!r} negates {q!r}"
    return None


def _slot_swap(a: list[str], b: list[str]) -> str | None:
    ops = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
           if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return None
    _, i1, i2, j1, j2 = ops[0]
    left, right = a[i1:i2], b[j1:j2]
    if len(left) > 3 or len(right) > 3:
        return None
    content = [w for w in left if w not in STOPWORDS], [w for w in right if w not in STOPWORDS]
    if content[0] and content[1]:
        return f"different subject: {' '.join(left)!r} vs {' '.join(right)!r}"
    return None


def _order_swap(a: list[str], b: list[str]) -> str | None:
    if not (_COMPARATIVE & set(a) and _COMPARATIVE & set(b)):
        return None
    content_a = [w for w in a if w not in STOPWORDS]
    content_b = [w for w in b if w not in STOPWORDS]
    if sorted(content_a) == sorted(content_b) and content_a != content_b:
        return "comparison order differs"
    return None


def _entities(text: str) -> set[str]:
    """Acronyms, alphanumeric codes and capitalised words that do not start a sentence."""
    found = set()
    for match in _ENTITY.finditer(text):
        before = text[: match.start()].rstrip()
        if before and before[-1] not in ".!?\"'(" or not re.fullmatch(r"[A-Z][a-z]+", match.group(0)):
            found.add(match.group(0))
    return found


def contradiction(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` may say or ask different things, or None when no cue is found."""
    if numbers_in(a) != numbers_in(b):
        return f"numbers differ: {sorted(numbers_in(a))} vs {sorted(numbers_in(b))}"
    if negation_count(a) % 2 != negation_count(b) % 2:
        return "negation differs"
    ta, tb = [stem(t) for t in tokens(a)], [stem(t) for t in tokens(b)]
    only_a, only_b = set(tokens(a)) - set(tokens(b)), set(tokens(b)) - set(tokens(a))
    reason = _prefix_negated(only_a, only_b)
    if reason:
        return reason
    low_a = {t.split("'")[0] for t in tokens(a)} | set(tokens(a))
    low_b = {t.split("'")[0] for t in tokens(b)} | set(tokens(b))
    entities = {e for e in _entities(a) if e.lower() not in low_b}
    entities |= {e for e in _entities(b) if e.lower() not in low_a}
    if entities:
        return f"names differ: {sorted(entities)}"
    axes = ((_UP, _DOWN, "direction"), (_GOOD, _BAD, "valence"), (_FRAGILE, _ROBUST, "risk"))
    for up, down, name in axes:
        if _axis(sorted(only_a), up, down) != _axis(sorted(only_b), up, down):
            return f"{name} words differ"
    return _slot_swap(ta, tb) or _order_swap(ta, tb)


def small_edit(a: str, b: str, max_words: int = 4) -> bool:
    """True when ``b`` is ``a`` with at most ``max_words`` words changed (a revision)."""
    diff = set(map(stem, tokens(a))) ^ set(map(stem, tokens(b)))
    return 0 < len(diff) <= max_words


def different_question(a: str, b: str, judge: Judge | None = None,
                       sentences: SentenceJudge | None = None,
                       rewording: RewordingJudge | None = None) -> str | None:
    """Why ``a`` and ``b`` are not the same question, or None when they are.

    The answer cache's rule (:mod:`onebox.knowledge.equivalence`): tense and modals agree;
    each question in one form per shape (a question word as the slot it asks for, an
    A-not-A question as a yes/no one); the same numbers (normalised), negations (an antonym
    counts as one), and roles (who did what to whom), with the words that differ paired
    up as meaning the same (WordNet for English, then ``sentences``, a paraphrase model,
    for open-class English words it leaves; ``judge``, the embedding model, for Chinese
    words; ``rewording``, a cross-encoder, for the unprotected words still left in either
    language). Without a judge, differing Chinese words pair only as listed.
    """
    strict = strict_difference(a, b)
    if strict is not None:
        return strict
    ca, cb = canonical(a), canonical(b)
    reason = strict_reason(ca, cb)
    if reason is None or not reason.startswith(("terms differ", "roles differ",
                                                "negation differs")):
        return reason
    found = reconcile(a, b, judge, sentences, rewording)
    if isinstance(found, str):
        return reason if reason.startswith("negation") else found
    flips = sum(1 for *_, how in found.pairs if how == "antonym")
    if (parse_question(found.a).negations != parse_question(ca).negations
            or parse_question(found.b).negations != parse_question(cb).negations + flips):
        return reason  # a rewriting never adds or drops a negation (but for an antonym)
    again = strict_reason(found.a, found.b)
    if (again is not None and again.startswith("roles differ")
            and found.a.replace("的", "") == found.b.replace("的", "")):
        return None  # 苹果公司的总部 / 苹果公司总部: the same words, one 的 apart
    if again is not None and found.pairs:
        said = "; ".join(f"{x!r} ~ {y!r} ({how})" for x, y, how in found.pairs[:3])
        return f"{again} (after reading {said})"
    return again


def strict_reason(a: str, b: str) -> str | None:
    """The strict reading: the same numbers, negations, content terms (up to the synonym
    list) and roles. See :mod:`onebox.knowledge.question`."""
    if normalise(a).split() == normalise(b).split():
        return None
    fa, fb = parse_question(a), parse_question(b)
    if not fa.terms or not fb.terms:
        return "nothing to compare: a question without words is never the same question"
    if fa.numbers != fb.numbers:
        return f"numbers differ: {list(fa.numbers)} vs {list(fb.numbers)}"
    if fa.negations != fb.negations:
        return "negation differs"
    if fa.terms != fb.terms:
        only_a = sorted(set(fa.terms) - set(fb.terms)) or list(fa.terms)
        only_b = sorted(set(fb.terms) - set(fa.terms)) or list(fb.terms)
        return f"terms differ: {' '.join(only_a)!r} vs {' '.join(only_b)!r}"
    if (fa.wh_object != fb.wh_object or possessors_differ(fa.possessors, fb.possessors)
            or roles_differ(fa.order, fb.order)):
        return f"roles differ: {' '.join(fa.order)!r} vs {' '.join(fb.order)!r}"
    return None
