"""A question read for comparison: content terms, numbers, negations and word order.

    form = parse_question("Did James offer John the job?")
    form.terms     # ('jam', 'job', 'john', 'offer'): stemmed, a sorted multiset
    form.order     # ('jam', 'offer', 'john', 'job'): who did what to whom

Pure and model-free. English is read as words (stemmed, mapped through a small
synonym list); Chinese as characters after its synonym, negation and number
words are read, so no segmenter is needed. Numbers are normalised (``three``,
``3``, ``三`` and ``3个`` are the same number; ``twenty-one`` is 21). Negations are
words (``not``, ``never``, ``没有``, ``未``), never a character inside another word
(``别名`` is "alias", ``未来`` is "future"). Words that only place a question in time
or space (``today``, ``in 2019``, ``在海平面``) count as terms but are left out of
``order``; ``A and B`` is unordered, and a passive (``A was hired by B``, ``A被B雇用``)
reads as its active form. :func:`roles_differ` compares two orders,
:func:`possessors_differ` who owns what (``Anna's brother``, ``张三的老师``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from onebox.knowledge import question_lexicon as lex
from onebox.knowledge.question_numbers import DATE_MARK, NUMBER_MARK, decode_mark, extract_numbers

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\ue001\ue002\ue010-\ue07f"
_PUNCT = ",.;:!?"
_SEGMENT = re.compile(f"《[^》]*》|[{_CJK}]+[{_PUNCT}]?|[^{_CJK}《]+")
# Words of any script (English rules apply to English words; any other word, Korean or
# Russian say, is a term as written), and the punctuation that ends a clause.
_EN_TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*|[,.;:!?]")
_MARKERS = frozenset({"of", "'s", "的", "and", "or", "by", lex.ZH_COPULA, lex.ZH_PASSIVE,
                      "和", "与", "跟"})
_PASSIVE_AUX = frozenset({"was", "were", "is", "are", "been", "being", "be", "got", "get"})
_WH = frozenset({"what", "who", "when", "where", "why", "how", "which", "whom"})
_WH_ARGUMENT = frozenset({"what", "which", "who", "whom"})  # may ask for subject or object


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
    wh_object: bool  # "who did X hire" asks for the object, "who hired X" for the subject
    possessors: tuple[str, ...]  # Anna's brother, the capital of Australia, 张三的老师


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
_MARK = f"[{NUMBER_MARK}{DATE_MARK}][\ue010-\ue07f]+"
_ZH_TOKEN = re.compile(f"{_MARK}|《[^》]*》|" + "|".join(lex.ZH_FREE) + f"|[{_CJK}]|[{_PUNCT}]")


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
        elif tok.endswith("'s"):
            words += [tok[:-2], "'s"]
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
        phrase = lex.EN_PHRASES.get((words[i], words[i + 1]) if i + 1 < len(words) else ("", ""))
        if filler:
            i += len(filler)
            continue
        if phrase:
            out.append(phrase)
            i += 2
            continue
        if not (words[i] == "to" and out and out[-1] == "how"):
            out.append(lex.EN_IRREGULAR.get(words[i], words[i]))
        i += 1
    return _way_modals(out)


def _way_modals(words: list[str]) -> list[str]:
    """"how can I", "where could we": the modal after a question word reads as "do"."""
    out = list(words)
    for i in range(1, len(out) - 1):
        after_wh = any(w in _WH for w in out[max(0, i - 3) : i])
        if out[i] in lex.EN_WAY_MODALS and out[i + 1] in lex.EN_SUBJECT_PRONOUNS and after_wh:
            out[i] = "do"
    return out


def wh_object(words: list[str]) -> bool:
    """A question word followed (within three words) by do/does/did and no "not" asks for the
    object: "who did Maria hire", "which startup did they buy"."""
    for i, word in enumerate(words):
        if word in _WH_ARGUMENT:
            for j in range(i + 1, min(i + 4, len(words))):
                if words[j] in lex.EN_DO:
                    return j + 1 < len(words) and words[j + 1] != "not"
            return False
    return False


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
        if word == "'s" and (not tokens or tokens[-1].text in _WH | _MARKERS):
            continue  # what's, it's: "is", not a possessive
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
        if raw[i][0] in (NUMBER_MARK, DATE_MARK):
            tokens.append(Token("#" + decode_mark(raw[i][1:]), free=raw[i][0] == DATE_MARK))
        elif raw[i] == "的":
            if _possessive_de(raw, i, tokens):
                tokens.append(Token(raw[i]))
        elif raw[i] not in lex.ZH_FILLER_CHARS:
            tokens.append(Token(raw[i], free=raw[i] in lex.ZH_FREE))
        i += 1
    return tokens, lex.ZH_PASSIVE in raw


def _possessive_de(raw: list[str], i: int, before: list[Token]) -> bool:
    """的 between two words of this run; not 是…的 or a nominal 的 at the end (最近的是)."""
    after = next((t for t in raw[i + 1 :] if t not in lex.ZH_FILLER_CHARS), "")
    return bool(before) and after not in ("", lex.ZH_COPULA) and after not in _PUNCT


def _reorder(tokens: list[Token], passive_marker: str | None) -> list[Token]:
    """Apply the order rules (A and B, passive) to one clause's tokens."""
    fixed = [t for t in tokens if not t.free]
    if passive_marker and any(t.text == passive_marker for t in fixed):
        at = next(i for i, t in enumerate(fixed) if t.text == passive_marker)
        left, right = fixed[:at], fixed[at + 1 :]
        if passive_marker == lex.ZH_PASSIVE:
            fixed = right + left
        elif left and right:
            fixed = right + left[-1:] + left[:-1]
    return _sort_coordination(fixed)


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


def possessors(tokens: list[Token]) -> tuple[str, ...]:
    """Whose: the term before ``'s`` or ``的``, the last term of the phrase after ``of``,
    and what follows ``than``/``比``;
    "?" when a time word or a date stands before ``的`` (今天的, 2019年的)."""
    found: list[str] = []
    for i, tok in enumerate(tokens):
        if tok.text in ("'s", "的"):
            before = [t for t in tokens[:i] if t.text not in _MARKERS and t.text not in _PUNCT]
            found += ["?" if before[-1].free else before[-1].text] if before else []
        elif tok.text in ("than", "比"):  # what is compared with: "older than Tom"
            after = [t.text for t in tokens[i + 1 :] if t.text not in _MARKERS][:1]
            found.append("than:" + "".join(after).strip(_PUNCT))
        elif tok.text == "of":
            run: list[str] = []
            for t in tokens[i + 1 :]:
                if t.free or t.text in _MARKERS or t.text in _PUNCT:
                    break
                run.append(t.text)
            found += run[-1:]
    return tuple(sorted(found))


def possessors_differ(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """An owner on one side not on the other, unless an unknown ("?") there may be it."""
    only_a = Counter(x for x in a if x != "?") - Counter(x for x in b if x != "?")
    only_b = Counter(x for x in b if x != "?") - Counter(x for x in a if x != "?")
    return only_a.total() > b.count("?") or only_b.total() > a.count("?")


def roles_differ(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """True when ``b`` reverses three terms of ``a`` around the middle one (A v B -> B v A).

    Moving one block of words (``In May, did James...`` / ``Did James... in May``,
    ``Tokyo's population`` / ``population of Tokyo``) never reverses such a triple;
    swapping who does what to whom always does. Two questions that both have one copula
    (``是``) must have the same two sides.
    """
    sides_a, sides_b = _copula_sides(a), _copula_sides(b)
    if sides_a and sides_b:
        return sides_a != sides_b
    a, b = _drop(a, lex.ZH_COPULA), _drop(b, lex.ZH_COPULA)
    if sorted(a) != sorted(b):
        return True
    pa, pb = _positions(a), _positions(b)
    for x in pa:
        for y in pa:
            if pa[x] < pa[y] and pb[x] > pb[y] and any(
                    pa[x] < pa[v] < pa[y] and pb[y] < pb[v] < pb[x] for v in pa):
                return True
    return False


_SOURCE, _GOAL = frozenset({"from"}), frozenset({"to", "into", "toward", "towards"})
_PHRASE_ENDS = _SOURCE | _GOAL | lex.EN_PP_STARTS | _WH | lex.EN_DO | frozenset(
    {"for", "with", "by", "via", "and", "or"})
_CASES = {"i": ("I", "subject"), "me": ("I", "object"), "we": ("we", "subject"),
          "us": ("we", "object"), "he": ("he", "subject"), "him": ("he", "object"),
          "they": ("they", "subject"), "them": ("they", "object")}  # "her": also whose


def role_swap(a: str, b: str) -> str | None:
    """Why ``a`` and ``b`` give someone or something opposite roles, or None: a place one
    question goes from and the other goes to (``from the US to India`` / ``from India to
    the US``), or a person one asks about as the doer and the other as the receiver
    (``what did I get Helen`` / ``what did Helen get me``). English words only."""
    da, db = _directions(a), _directions(b)
    for term in sorted(da.keys() & db.keys()):
        if da[term] != db[term]:
            ends = {"from": "start", "to": "destination"}
            return (f"roles differ: {term!r} is the {ends[da[term]]} in one and the "
                    f"{ends[db[term]]} in the other")
    ca, cb = _cases(a), _cases(b)
    for person in sorted(ca.keys() & cb.keys()):
        if len(ca[person]) == len(cb[person]) == 1 and ca[person] != cb[person]:
            return (f"roles differ: {person!r} is the {next(iter(ca[person]))} of one and the "
                    f"{next(iter(cb[person]))} of the other")
    return None


def _directions(text: str) -> dict[str, str]:
    """Each term of a phrase after from / to (up to three words), and which it follows;
    a term after both is left out."""
    words = _EN_TOKEN.findall(unicodedata.normalize("NFKC", text))  # "US" keeps its case
    found: dict[str, set[str]] = {}
    for i, word in enumerate(words):
        low = word.lower()
        if low not in _SOURCE | _GOAL:
            continue
        role = "from" if low in _SOURCE else "to"
        taken = 0
        for nxt in words[i + 1 :]:
            if nxt in _PUNCT or nxt.lower() in _PHRASE_ENDS or taken == 3:
                break
            if not (nxt.isupper() and len(nxt) > 1) and nxt.lower() in lex.EN_STOPWORDS:
                continue  # "the", "my"; but "US" is a name, not "us"
            found.setdefault(stem(nxt.lower()), set()).add(role)
            taken += 1
    return {term: next(iter(roles)) for term, roles in found.items() if len(roles) == 1}


def _cases(text: str) -> dict[str, set[str]]:
    """Each personal pronoun's person and the cases it is used in (I: subject, me: object)."""
    out: dict[str, set[str]] = {}
    for word in _EN_TOKEN.findall(text):
        if word.lower() in _CASES and not (word.isupper() and len(word) > 1):  # "US": a name
            person, case = _CASES[word.lower()]
            out.setdefault(person, set()).add(case)
    return out


def _drop(order: tuple[str, ...], term: str) -> tuple[str, ...]:
    return tuple(t for t in order if t != term)


def _copula_sides(order: tuple[str, ...]) -> frozenset[tuple[str, ...]] | None:
    """``A是B`` as the unordered pair {A, B}: 谁是总裁 = 总裁是谁, but not 张伟是谁的老板."""
    if order.count(lex.ZH_COPULA) != 1:
        return None
    at = order.index(lex.ZH_COPULA)
    return frozenset({order[:at], order[at + 1 :]})


def _positions(order: tuple[str, ...]) -> dict[tuple[str, int], int]:
    """Each term's k-th occurrence -> its index, so 妈妈 is two terms that can move."""
    seen: dict[str, int] = {}
    out: dict[tuple[str, int], int] = {}
    for i, term in enumerate(order):
        out[(term, seen.get(term, 0))] = i
        seen[term] = seen.get(term, 0) + 1
    return out


@functools.lru_cache(maxsize=4096)
def parse_question(text: str) -> QuestionForm:
    """Read ``text`` (English, Chinese or both) into the parts the cache guard compares."""
    text = _zh_rewrite(normalise(text))
    text, numbers = extract_numbers(text)
    text, negations = _zh_negations(text)
    tokens: list[Token] = []
    passive: str | None = None
    asks_object = False
    for segment in _SEGMENT.findall(text):
        if segment.startswith("《"):
            tokens.append(Token(segment))
        elif re.match(f"[{_CJK}]", segment):
            zh, zh_passive = _zh_tokens(segment)
            tokens += zh
            passive = lex.ZH_PASSIVE if zh_passive else passive
        else:
            words = _en_words(segment)
            asks_object = asks_object or wh_object(words)
            en, neg, en_passive = _en_tokens(words)
            tokens += en
            negations += neg
            passive = passive or ("by" if en_passive else None)
    terms = sorted(t.text for t in tokens if t.text not in _MARKERS and t.text not in _PUNCT)
    return QuestionForm(tuple(terms), tuple(sorted(numbers)), negations,
                        _clause_order(tokens, passive), asks_object, possessors(tokens))
