"""A question read for comparison: content terms, numbers, negations and word order.

    form = parse_question("Did James offer John the job?")
    form.terms     # ('james', 'john', 'job', 'offer') as a sorted multiset
    form.order     # ('james', 'offer', 'john', 'job'): who did what to whom

Pure and model-free. English is read as words (stemmed, mapped through a small
synonym list); Chinese as characters after its synonym, negation and number
words are read, so no segmenter is needed. Numbers are normalised (``three``,
``3``, ``三`` and ``3个`` are the same number; ``twenty-one`` is 21). Negations are
words (``not``, ``never``, ``没有``, ``未``), never a character inside another word
(``别名`` is "alias", ``未来`` is "future"). Words that only place a question in time
or space (``today``, ``in 2019``, ``在海平面``) count as terms but may move; the rest
keep their order, except that ``X of Y`` reads as ``Y X``, ``A and B`` is unordered,
and a passive (``A was hired by B``, ``A被B雇用``) reads as its active form.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from onebox.knowledge import question_lexicon as lex
from onebox.knowledge.question_numbers import extract_numbers

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_PUNCT = ",.;:!?"
_SEGMENT = re.compile(f"《[^》]*》|[{_CJK}]+[{_PUNCT}]?|[^{_CJK}《]+")
_EN_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*|[,.;:!?]")
_MARKERS = frozenset({"of", "and", "or", "by", lex.ZH_COPULA, lex.ZH_PASSIVE, "和", "与", "跟"})
_PASSIVE_AUX = frozenset({"was", "were", "is", "are", "been", "being", "be", "got", "get"})
_WH = frozenset({"what", "who", "when", "where", "why", "how"})


@dataclass(frozen=True)
class Token:
    text: str
    free: bool = False  # may move without changing the question


@dataclass(frozen=True)
class QuestionForm:
    terms: tuple[str, ...]
    numbers: tuple[str, ...]
    negations: int
    order: tuple[str, ...]
    copula_sides: frozenset[tuple[str, ...]] | None


def _synonym_table(groups: tuple[tuple[str, ...], ...], key: object) -> dict[str, str]:
    fold = key if callable(key) else (lambda w: w)
    return {fold(w): fold(group[0]) for group in groups for w in group}


def stem(word: str) -> str:
    """A crude, consistent stemmer: plural, -ing, -ed, a doubled consonant, a final e."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


_EN_SYN = _synonym_table(lex.EN_SYNONYMS, stem)
_ZH_SYN = sorted(((w, g[0]) for g in lex.ZH_SYNONYMS for w in g[1:]), key=lambda p: -len(p[0]))
_ZH_NEG = re.compile("|".join(lex.ZH_NOT_NEGATIONS + lex.ZH_NEGATIONS))
_ZH_TOKEN = re.compile("《[^》]*》|" + "|".join(lex.ZH_FREE) + f"|[{_CJK}]|[{_PUNCT}]")


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower().replace("’", "'")
    return text.replace("。", ".").replace("、", ",").replace("\"", " ").replace("“", " ")


def _zh_rewrite(text: str) -> str:
    for word, canonical in _ZH_SYN:
        text = text.replace(word, canonical)
    for filler in lex.ZH_FILLERS:
        text = text.replace(filler, " ")
    return re.sub(r"(^|[\s,.!?])请", r"\1", text)


def _zh_negations(text: str) -> tuple[str, int]:
    count = 0

    def cut(match: re.Match[str]) -> str:
        nonlocal count
        if match.group(0) in lex.ZH_NOT_NEGATIONS:
            return match.group(0)
        count += 1
        return " "

    return _ZH_NEG.sub(cut, text), count


def _en_words(segment: str) -> list[str]:
    words: list[str] = []
    for tok in _EN_TOKEN.findall(segment):
        if tok.endswith("n't"):
            base = tok[:-3]
            words += [{"ca": "can", "wo": "will", "sha": "shall"}.get(base, base), "not"]
        elif "'" in tok:
            words.append(tok.split("'")[0])
        else:
            words.append(tok)
    return _drop_fillers(words)


def _drop_fillers(words: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        filler = next((f for f in lex.EN_FILLERS if tuple(words[i : i + len(f)]) == tuple(f)), None)
        if filler:
            i += len(filler)
            continue
        if not (words[i] == "to" and out and out[-1] == "how"):
            out.append(words[i])
        i += 1
    return out


def _en_tokens(words: list[str]) -> tuple[list[Token], int, bool]:
    """Content tokens and markers of one Latin segment, its negation count, passive or not."""
    tokens: list[Token] = []
    negations, in_pp, passive = 0, 0, False
    for word in words:
        if word in lex.EN_NEGATIONS:
            negations += 1
            continue
        passive = passive or word in _PASSIVE_AUX
        if word in lex.EN_PP_STARTS:
            in_pp = 3
            continue
        if word in _PUNCT or word in _MARKERS or word in _WH:
            in_pp = 0
        if word in _MARKERS or word in _PUNCT:
            tokens.append(Token(word))
        elif word not in lex.EN_STOPWORDS:
            text = _EN_SYN.get(stem(word), stem(word))
            tokens.append(Token(text, free=in_pp > 0 or text in lex.EN_FREE))
            in_pp = max(in_pp - 1, 0)
    return tokens, negations, passive


def _zh_tokens(segment: str) -> tuple[list[Token], bool]:
    raw = _ZH_TOKEN.findall(segment)
    tokens: list[Token] = []
    i = 0
    while i < len(raw):
        if raw[i] == lex.ZH_PREPOSITION:
            end = next((j for j in range(i + 1, min(i + 7, len(raw)))
                        if raw[j] == "的" or raw[j] in _PUNCT), None)
            if end is not None and end > i + 1:
                tokens += [Token(t, free=True) for t in raw[i + 1 : end]]
                i = end
            else:
                i += 1
            continue
        if raw[i] not in lex.ZH_FILLER_CHARS:
            tokens.append(Token(raw[i], free=raw[i] in lex.ZH_FREE))
        i += 1
    return tokens, lex.ZH_PASSIVE in raw


def _reorder(tokens: list[Token], passive_marker: str | None) -> list[Token]:
    """Apply the order rules (X of Y, A and B, passive) to one clause's tokens."""
    fixed = [t for t in tokens if not t.free]
    if passive_marker and any(t.text == passive_marker for t in fixed):
        at = next(i for i, t in enumerate(fixed) if t.text == passive_marker)
        left, right = fixed[:at], fixed[at + 1 :]
        if passive_marker == lex.ZH_PASSIVE:
            fixed = right + left
        elif left and right:
            fixed = right + left[-1:] + left[:-1]
    return _swap_of(_sort_coordination(fixed))


def _swap_of(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        if tokens[i].text == "of" and out and i + 1 < len(tokens):
            end = next((j for j in range(i + 1, len(tokens)) if tokens[j].text in _MARKERS), len(tokens))
            out = out[:-1] + tokens[i + 1 : end] + out[-1:]
            i = end
            continue
        out.append(tokens[i])
        i += 1
    return out


def _sort_coordination(tokens: list[Token]) -> list[Token]:
    out = list(tokens)
    for i in range(1, len(out) - 1):
        if out[i].text in {"and", "or", "和", "与", "跟"} and out[i - 1].text > out[i + 1].text:
            out[i - 1], out[i + 1] = out[i + 1], out[i - 1]
    return out


def _clause_order(tokens: list[Token], passive_marker: str | None) -> tuple[str, ...]:
    clauses: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.text in _PUNCT:
            clauses.append([])
        else:
            clauses[-1].append(tok)
    ordered = [t for clause in clauses for t in _reorder(clause, passive_marker)]
    return tuple(t.text for t in ordered if t.text not in _MARKERS - {lex.ZH_COPULA})


def _copula_sides(order: tuple[str, ...]) -> frozenset[tuple[str, ...]] | None:
    if order.count(lex.ZH_COPULA) != 1:
        return None
    at = order.index(lex.ZH_COPULA)
    return frozenset({order[:at], order[at + 1 :]})


def parse_question(text: str) -> QuestionForm:
    """Read ``text`` (English, Chinese or both) into the parts the cache guard compares."""
    text = _zh_rewrite(normalise(text))
    text, numbers = extract_numbers(text)
    text, negations = _zh_negations(text)
    tokens: list[Token] = []
    passive: str | None = None
    for segment in _SEGMENT.findall(text):
        if segment.startswith("《"):
            tokens.append(Token(segment))
        elif re.match(f"[{_CJK}]", segment):
            zh, zh_passive = _zh_tokens(segment)
            tokens += zh
            passive = lex.ZH_PASSIVE if zh_passive else passive
        else:
            en, neg, en_passive = _en_tokens(_en_words(segment))
            tokens += en
            negations += neg
            passive = passive or ("by" if en_passive else None)
    order = _clause_order(tokens, passive)
    terms = sorted(t.text for t in tokens if t.text not in _MARKERS and t.text not in _PUNCT)
    return QuestionForm(tuple(terms), tuple(sorted(numbers)), negations,
                        tuple(t for t in order if t != lex.ZH_COPULA), _copula_sides(order))
