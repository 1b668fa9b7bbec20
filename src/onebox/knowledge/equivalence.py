"""The same question in other words: which differing words may differ, and which never.

The strict reading (:mod:`onebox.knowledge.question`) wants the same content terms on both
sides. This module lets the words that differ differ when they mean the same thing, and
then hands both questions, rewritten with one side's words, back to the strict reading,
which still compares numbers, negations and roles:

1. **One form per question shape.** A question word is read as the slot it asks for
   (``how often`` = ``how many times``; 什么地方 = 何处 = 哪里; 什么 = 哪个 = 何); an A-not-A
   question is a yes/no question (有没有 X = 有 X 吗, 是否 X = X 吗); ``has X got`` = ``does X
   have``; 的 between two words may go (苹果公司的总部 = 苹果公司总部); 千克 is a unit, not
   a thousand; 零下5度 is -5; "一条" before 什么 is an article, not a number.
2. **Never relaxed:** tense (``does``/``did``, ``is``/``was``, ``will``; 过, 会, 曾), modals
   (``can``/``must``; 可以/必须), quantifiers (``everyone``/``anyone``; 所有/有), names
   (capitalised words; Chinese names, places, organisations and time words by their part
   of speech: a name pairs only with a name WordNet gives the same main sense, UK /
   United Kingdom), kinship words (爸爸/妈妈), and words opposed in meaning.
3. **Words that differ must pair up:** English by WordNet (a shared sense, never two
   measures or units: :mod:`onebox.knowledge.word_sense`), multi-word verbs joined
   (``get rid of``, ``take in``); Chinese, cut by jieba, by the Tongyici Cilin (a synonym
   group pairs, a group of related words never does), else by the embedding model's
   similarity of the two words (``judge``; a threshold chosen on the development pairs;
   two words that begin or end alike are judged by what differs: 坐飞机 / 坐火车 as 飞机 /
   火车).
   An antonym pair (``like``/``dislike``) becomes a negation, so "does not like" and
   "dislikes" agree and "likes" and "dislikes" do not. Light words (particles, 是, 有,
   ``ever``) stay out of the pairing and are cut where one side has more of them.

:func:`reconcile` returns the two questions rewritten (and the pairs it used), or why not.
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from onebox.knowledge import word_sense
from onebox.knowledge.question import role_swap, stem

Judge = Callable[[str, str], bool]  # are these two Chinese words the same here?


@dataclass(frozen=True)
class SentenceJudge:
    """A sentence model's similarity of two whole English questions (``similarity``) and
    the least that reads them as one (see :func:`reconcile`)."""

    similarity: Callable[[str, str], float]
    threshold: float


@dataclass(frozen=True)
class RewordingJudge:
    """A cross-encoder's probability that two whole questions, in any language, ask the
    same thing (``score``: :mod:`onebox.llm.rewording`); the least that reads them as one
    (``threshold``), and the least that lets words paired only by an embedding's similarity
    stand (``veto``: 猫/狗, 沸点/燃点 and eat/avoid score close to alike, and far below it)."""

    score: Callable[[str, str], float]
    threshold: float
    veto: float = 0.0


def _words(text: str) -> list[str]:
    return text.split()


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")
_EN_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")

# 1. one form per question shape (applied in order; a longer form first)
_ZH_FORMS: tuple[tuple[str, str], ...] = (
    # days of the week, one name each (星期天 = 礼拜日 = 周日); 一共 / 总共 (in all) add nothing
    (r"(?:星期|礼拜)([一二三四五六日])", r"周\1"), (r"(?:星期|礼拜|周)天", "周日"), (r"一共|总共", ""),
    # a shape per question: who wrote it, what it means, what one is called, one's job, the
    # way to a place, how long a time takes
    (r"([\u4e00-\u9fff《》“”]+?)的作者是(?:谁|哪位)", r"谁写了\1"), (r"是什么意思", "的意思是什么"),
    (r"叫什么名字", "叫什么"), (r"(?:是)?做什么工作的?", "的职业是什么"),
    (r"去([\u4e00-\u9fff]+?)怎么走", r"怎么去\1"), (r"^([\u4e00-\u9fff]+?)怎么走", r"怎么去\1"),
    (r"多长时间|多少时间", "多久"),
    (r"为什么", "\ue100"), (r"的?(?:是)?(?:什么原因|怎么回事)", "\ue100"),
    (r"(?:有|用)什么(?:好)?(?:办法|方法)(?:可以|能够|能)?", "\ue103"),
    (r"(要|需要|得)(?:几|多少)个?(?:小时|钟头)", r"\1多久"),
    (r"的?(?:售价|票价|费用|收费)(?:是|为)?多少", "多少钱"),
    (r"什么地方|何处|何地|哪儿|哪里", "\ue101"),
    (r"什么时候|何时|哪一?天|几月几[号日]", "\ue102"), (r"(.+?)的原因是什么", "\ue100\\1"),
    (r"什么样|怎么样|怎样|如何|怎么", "\ue103"),
    (r"([\u4e00-\u9fff]+?)的([\u4e00-\u9fff]{1,4}?)有多少", r"\1有多少\2"),
    # a measure asked as "its length is how much" is "how long is it" (多长, 多高, 多远...)
    (r"的?(长|高|宽|深|重|厚)度(?:是|为|有)?多少", r"有多\1"), (r"的?重量(?:是|为|有)?多少", "有多重"),
    (r"的?距离(?:是|为|有)?多少", "有多远"), (r"的?(?:价格|价钱)(?:是|为)?多少", "多少钱"),
    (r"的([\u4e00-\u9fff])法是什么", r"怎么\1"),
    # "X 有多少 Y" (Y no counted thing: 人口, 钱) asks what "X 的 Y 是多少" does
    (r"有多少(?![个位条只张本座部首家件名所项类种岁次年天])([\u4e00-\u9fff]{1,4})(?=[？?]|$)",
     r"的\1是多少"),
    (r"[为是]多少", "是\ue105"), (r"几点钟?", "\ue102"), (r"多少|几", "\ue104"), (r"哪位", "谁"),
    (r"哪一?[门个位种家件只本座部首条张所项类名]", "\ue105"),
    (r"哪一个|哪一|哪个|哪些|哪|什么|何|啥", "\ue105"),
    # an A-not-A question is a yes/no one: 开不开门 = 开门, 喜不喜欢 = 喜欢, 可不可以 = 可以
    (r"有没有", "有"), (r"([\u4e00-\u9fff])不\1", r"\1"), (r"是否", ""), (r"千克", "公斤"),
    (r"零下\s*", "-"),
    (r"\ue103才能", "\ue103"), (r"[该要]\ue103办", "\ue103办"),
    (r"离([\u4e00-\u9fff]+?)有?多远", r"到\1有多远"),
    (r"和([\u4e00-\u9fff]+?)之间有多远", r"到\1有多远"),
    (r"一[条个位种家件只本座部首](?=\ue105|\ue103)", ""),
    (r"的一[条个位种家件只本座部首]", "的"),
)
_ZH_SLOTS = {"\ue100": "为什么", "\ue101": "哪里", "\ue102": "何时", "\ue103": "怎么",
             "\ue104": "多少", "\ue105": "什么"}
EN_MEASURES = {"height": "tall", "age": "old", "depth": "deep", "length": "long",
               "weight": "heavy", "width": "wide", "size": "big"}
_EN_FORMS: tuple[tuple[str, str | Callable[[re.Match[str]], str]], ...] = (
    (r"\bhow often\b", "how many times"), (r"\bwhat time\b", "when"),
    (r"\bwhich\b", "what"), (r"\bhas ((?:\w+ ){0,3}\w+) got\b", r"does \1 have"), (r"\bwhom\b", "who"),
    (r"\b(how|where|what|when|why) (can|could) (i|we|you)\b", r"\1 do \3"),
    (r"^could (you|i|we)\b", r"can \1"), (r"^might (i|we)\b", r"may \1"),
    (r"^(?:please )?(?:explain|describe|tell me) (how|what|why|where|when|who)\b", r"\1"),
    # a polite wrapper asks the question it wraps: "could you tell me what X is" = "what is X"
    (r"^(?:can|would) you (?:please )?(?:tell me|explain|let me know) (how|what|why|where|when|"
     r"who|which)\b(.+?) (is|are|was|were)\?$", r"\1 \3\2?"),
    (r"^(?:can|would) you (?:please )?(?:tell me|explain|let me know) (how|what|why|where|when|"
     r"who|which)\b", r"\1"),
    (r"\b(am|is|are) (i|we|you|he|she|they|it) (?:allowed|permitted) to\b", r"can \2"),
    (r"^by who (was|were) (.+?) (\w+ed)\b", r"who \3 \2"),
    (r"\b(has|have|had) (\w+) (ever )?been to\b", r"\1 \2 \3visited"),
    (r"\bhow much (?:does|do|did) (.+?) cost\b", r"what is the price of \1"),
    (r"\bhave ((?:\w+ ){0,3}\w+) got\b", r"do \1 have"), (r"\bhow much time\b", "how long"),
    # X's height = the height of X (for every noun the forms below read)
    (r"\bwhat('s| is| was) (.+?)'s (height|age|depth|length|weight|width|size|population|"
     r"birthplace|place of birth)\?", r"what\1 the \3 of \2?"),
    # a measure asked as a noun is its adjective: the height of X = how tall X is
    (r"\bwhat(?:'s| is| was) the (height|age|depth|length|weight|width|size) of (.+?)\?",
     lambda m: f"how {EN_MEASURES[m.group(1)]} is {m.group(2)}?"),
    (r"\bwhat does (.+?) weigh\b", r"how heavy is \1"),
    (r"^is there (an? |any )?(.+?) (?:at|in) (the )?(.+?)\?$", r"does \3\4 have \1\2?"),
    # a cause asked for: "what caused X to V" = "why did X V", "what makes X Y" = "why is X Y"
    (r"\bwhat(?:'s| is| was) the (?:reason|cause) (?:why |that |for )?", "why "),
    (r"\bwhat (caused|made|causes|makes) (.+?) to (\w+)\b",
     lambda m: f"why {'did' if m.group(1)[-1] == 'd' else 'does'} {m.group(2)} {m.group(3)}"),
    (r"\bwhat (made|makes) (.+?) (\w+)\?$",
     lambda m: f"why {'was' if m.group(1) == 'made' else 'is'} {m.group(2)} {m.group(3)}?"),
    (r"\bwhat(?:'s| is| was) the population of (.+?)\?", r"how many people live in \1?"),
    # a distance asked either way round: "how far is X from Y" = "the distance from Y to X"
    (r"\b(?:how far (?:away )?is (.+?) from|what(?:'s| is) the distance (?:from|between) "
     r"(.+?) (?:to|and)) (.+?)\?", lambda m: "how far apart are {} and {}?".format(
        *sorted((m.group(1) or m.group(2), m.group(3)), key=str.lower))),
    (r"\bwhat (?:does|do) (.+?) do for (?:a living|work)\b", r"what is \1's job"),
    (r"\bwhat(?:'s| is) (.+?)'s (?:occupation|profession)\b", r"what is \1's job"),
    (r"\bwho (is|was) the (?:author|writer) of\b", r"who wrote"),
    # "how do I X" = "how to X" = "what is the (best) way to X" ("how did I" keeps its tense)
    (r"\bwhat(?:'s| is) the (?:best )?way to (the|a|an)\b", r"how do i get to \1"),
    (r"\bwhat(?:'s| is| are) the (?:best )?(?:way|steps) to\b", "how do i"),
    (r"\bwhat(?:'s| is| are) the (?:right |best |correct |proper )?(?:way|steps|process|"
     r"procedure) (?:to|for)\b", "how do i"),
    (r"\b(?:in |on )?what (?:year|date)\b", "when"),
    (r"\bwhat(?:'s| is| was) the (?:birthplace|place of birth) of (.+?)\?", r"where was \1 born?"),
    (r"^how (?:(?:do|can|should) (?:i|you|we|one)|to) ", "how do i "),
)

# 2. never relaxed
EN_TENSE = {"do": "present", "does": "present", "is": "present", "are": "present",
            "am": "present", "has": "perfect", "have": "perfect", "did": "past",
            "was": "past", "were": "past", "had": "past", "will": "future",
            "shall": "future", "won't": "future"}
EN_MODALS = frozenset({"can", "could", "must", "should", "may", "might", "would", "ought"})
EN_MODAL_CLASS = {"could": "can", "might": "may"}  # "could you suggest" asks "can you"
EN_QUANTIFIERS = _set(
    "all every everyone everybody everything any anyone anybody anything some someone "
    "somebody something none nobody nothing each most few many several both either "
    "neither only")
ZH_ASPECT = {"过": "experienced", "曾": "past", "曾经": "past", "会": "future",
             "将": "future", "将要": "future", "即将": "future", "正在": "ongoing"}
ZH_MODAL_CLASSES = (_set("可以 能 能够 可"), _set("必须 必 须 得"),
                    _set("应该 应当 该"), _set("需要 要"))
ZH_MODALS = frozenset().union(*ZH_MODAL_CLASSES)
_END = {"from": "start", "to": "destination"}
ZH_GOING = _set("到 去 至 往 飞往 前往 开往 飞")
ZH_ALREADY = _set("已经 已 早已 刚 刚刚 刚才 仍 仍然 还 尚")  # what has happened, what is left
_ZH_NOT_REWORDABLE = tuple(ZH_MODALS | ZH_ASPECT.keys() | ZH_ALREADY)  # word beginnings
EN_PREPOSITIONS = _set(
    "about above across after against along among around before behind below beneath "
    "beside besides between beyond despite down during except from inside into near off "
    "onto outside over past since through throughout till toward towards under underneath "
    "until up upon via within without")
ZH_QUANTIFIERS = _set("所有 全部 都 每 每个 有些 有的 一些 任何 部分 大多数 少数 唯一")
ZH_KIN = _set(
    "爸爸 父亲 爸 妈妈 母亲 妈 儿子 女儿 哥哥 弟弟 姐姐 妹妹 丈夫 妻子 老婆 老公 爷爷 奶奶 "
    "外公 外婆 叔叔 阿姨 舅舅 师父 师傅 徒弟 老师 学生 女儿 孙子 孙女")
ZH_SAME_KIN = (frozenset({"爸爸", "父亲", "爸"}), frozenset({"妈妈", "母亲", "妈"}),
               frozenset({"妻子", "老婆"}), frozenset({"丈夫", "老公"}),
               frozenset({"师父", "师傅"}))
# characters that mean opposite things: a pair of words holding them is an antonym pair
_ZH_OPPOSITE = [tuple(p) for p in _words(
    "大小 多少 高低 长短 宽窄 深浅 上下 涨跌 升降 增减 开关 买卖 借还 来去 进出 早晚 快慢 "
    "新旧 好坏 冷热 贵贱 胜负 赢输 前后 左右 内外 男女 老少 难易 轻重 厚薄 远近 强弱 生死 "
    "真假 正反 东西 南北 免收 爱恨 喜厌 加减 存取 入出 昨明 去明 今明 入离 入退 就离")]
_ZH_OPPOSITE_WORDS = [frozenset(p.split("/")) for p in _words(
    "喜欢/讨厌 便宜/贵 免费/收费 开启/关闭 打开/关闭 成功/失败 胜利/失败 同意/反对 "
    "支持/反对 允许/禁止 接受/拒绝 出生/去世 辞职/升职 开始/结束 上涨/下跌 增加/减少 "
    "提高/降低 作用/副作用 预约/取消 买/退 结婚/离婚 "
    # two ends of one trip or act: the embedding model scores them alike (出发/到达 0.93)
    "出发/到达 出发/抵达 起飞/降落 上车/下车 入住/退房 登录/退出 加入/退出 上班/下班 "
    "上学/放学 开门/关门 开业/倒闭 进口/出口 存款/取款 发送/接收 上传/下载 买入/卖出")]
# words a sentence model is never asked to bridge: question words (the slot asked for),
# ordinals, words of amount or order (first / second CEO, most / least favourite), and of
# how often (daily / weekly, usually / always)
EN_CLOSED = _set("what when where who whom whose which why how first second third fourth "
                 "fifth last next previous final former latter least most more less much "
                 "many few only same other another own hourly daily nightly weekly monthly "
                 "quarterly yearly annually always usually often sometimes occasionally "
                 "rarely seldom never frequently regularly normally generally typically")
EN_FILLER_WORDS = _set("ever just really actually exactly please")
EN_NEGATIONS = _set("not no never none nobody nothing neither nor without cannot")
ZH_NEGATION_CHARS = "不没未别勿"
ZH_NEGATIONS = _set("不 没 没有 未 无 非 别 勿 否")
ZH_LIGHT = _set("的 了 吗 呢 吧 啊 呀 一下 请问 请 是 在 有 到 于 由 从 给 着 地 得 之 所 "
                "主要 具体 一般 通常")
EN_LIGHT = _set("a an the is are was were be been being am do does did done of in on "
                "at to for with by about as it its this that there please just really "
                "actually exactly ever have has had get got per will shall")


@dataclass(frozen=True)
class Word:
    text: str
    key: str  # what two words are compared by (an English stem, a Chinese word)
    lang: str  # "en" or "zh"
    protected: str | None  # why it may not be replaced by another word
    start: int
    end: int


@dataclass(frozen=True)
class Reconciled:
    a: str
    b: str
    pairs: tuple[tuple[str, str, str], ...]  # (a's words, b's words, how they agree)


@functools.lru_cache(maxsize=4096)  # a lookup reads each candidate's question twice
def canonical(text: str) -> str:
    """The question in one form per shape (see the module, 1)."""
    out = text
    if _CJK.search(out):
        for pattern, repl in _ZH_FORMS:
            out = re.sub(pattern, repl, out)
        for mark, slot in _ZH_SLOTS.items():
            out = out.replace(mark, slot)
    lowered = out
    for en_pattern, en_repl in _EN_FORMS:
        lowered = re.sub(en_pattern, en_repl, lowered, flags=re.IGNORECASE)
    return _agent_nouns(lowered)


def _agent_nouns(text: str) -> str:
    """"who was the painter of X" = "who painted X": an agent noun (-er, -or) of a verb
    WordNet knows, after "who is/was the", reads as that verb."""
    def verb(match: re.Match[str]) -> str:
        noun = match.group(2).lower()
        stem_ = noun[:-2]
        for base in (stem_, stem_ + "e", stem_[:-1] if len(stem_) > 2 and stem_[-1] == stem_[-2]
                     else stem_):
            if any(s[0] == "v" for s in word_sense.senses(base)):
                return f"{match.group(1)} {base}"
        return match.group(0)
    return re.sub(r"\b(who) (?:is|was|were|are) the (\w+(?:er|or)) of\b", verb, text,
                  flags=re.IGNORECASE)


def en_tense(text: str) -> str | None:
    """The tense of the first auxiliary (``does``, ``did``, ``will``...), if any."""
    for word in _EN_WORD.findall(text.lower()):
        if word in EN_TENSE:
            return EN_TENSE[word]
        if word.endswith("n't") and word[:-3] in EN_TENSE:
            return EN_TENSE[word[:-3]]
    return None


def _verb_tense(text: str, other: str | None) -> str | None:
    """The tense of an English question without an auxiliary, read from its verbs, against
    a future one only: "who won" is past and "who wins" present beside "who will win"
    ("will" is no content word, so the tense is what tells them apart). Elsewhere a
    question without an auxiliary keeps no tense: "who painted X" is asked as "who was the
    painter of X", whose form drops the verb's tense."""
    found = _EN_WORD.findall(text.lower())
    if other != "future" or not found:
        return None
    return "past" if any(word_sense.verb_past(w) for w in found) else "present"


_EN_FUTURE_TIME = re.compile(r"\b(tomorrow|tonight|next (?:\w+))\b")


def _future_time(text: str) -> set[str]:
    """The future times an English question names (``tomorrow``, ``next week``): with one
    of them, a present-tense question asks about the future."""
    return set(_EN_FUTURE_TIME.findall(text.lower()))


def zh_aspects(text: str) -> tuple[str, ...]:
    """The Chinese tense and aspect words (过, 会, 曾经...), as a sorted tuple."""
    if not _CJK.search(text):
        return ()
    found = []
    for word, _ in word_sense.zh_words(text):
        bare = word[1:] if word[:1] in ZH_NEGATIONS and word[1:] in ZH_ASPECT else word
        if bare in ZH_ASPECT:
            found.append(ZH_ASPECT[bare])  # 不会 is 会 negated: the negation is counted apart
    return tuple(sorted(found))


ZH_QUESTION_WORDS = frozenset({*_ZH_SLOTS.values(), "谁"})


def zh_question_words(text: str) -> frozenset[str]:
    """The Chinese question words of a question in its one form (none: a yes/no question)."""
    if not _CJK.search(text):
        return frozenset()
    return frozenset(w for w, _ in word_sense.zh_words(text) if w in ZH_QUESTION_WORDS)


def strict_difference(a: str, b: str) -> str | None:
    """What the rewriting may never change: tense, and the modals of each side (read on
    the one form of each question: 会不会 is 会)."""
    a, b = canonical(a), canonical(b)
    ta, tb = en_tense(a), en_tense(b)
    ta, tb = ta or _verb_tense(a, tb), tb or _verb_tense(b, ta)
    if ta and tb and ta != tb and {ta, tb} != {"past", "perfect"} and not (
            {ta, tb} == {"present", "future"} and _future_time(a) & _future_time(b)):
        # "did you ever" asks what "have you ever" does; "is it open tomorrow" what "will
        # it be open tomorrow" does
        return f"tense differs: {ta} vs {tb}"
    if set(zh_aspects(a)) != set(zh_aspects(b)):
        return (f"tense differs: {sorted(set(zh_aspects(a))) or 'none'} vs "
                f"{sorted(set(zh_aspects(b))) or 'none'}")
    qa, qb = zh_question_words(a), zh_question_words(b)
    if qa != qb:
        return f"question words differ: {sorted(qa) or 'yes/no'} vs {sorted(qb) or 'yes/no'}"
    ma = {EN_MODAL_CLASS.get(w, w) for w in _EN_WORD.findall(a.lower()) if w in EN_MODALS}
    mb = {EN_MODAL_CLASS.get(w, w) for w in _EN_WORD.findall(b.lower()) if w in EN_MODALS}
    if ma and mb and ma != mb:
        return f"modal differs: {sorted(ma)} vs {sorted(mb)}"
    return role_swap(a, b) or _zh_direction_swap(a, b)


def _zh_direction_swap(a: str, b: str) -> str | None:
    """A place one question goes from and the other goes to: 上海到北京 / 从北京去上海."""
    da, db = _zh_directions(a), _zh_directions(b)
    for place in sorted(da.keys() & db.keys()):
        if da[place] != db[place]:
            return (f"roles differ: {place!r} is the {_END[da[place]]} in one and the "
                    f"{_END[db[place]]} in the other")
    return None


def _zh_directions(text: str) -> dict[str, str]:
    """Nouns after 从 or before 到/去/往 (gone from), and after 到/去/往 (gone to)."""
    cut = [(w, pos) for run in re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff]+", text)
           for w, pos in word_sense.zh_words(run)]
    found: dict[str, set[str]] = {}
    for i, (word, _) in enumerate(cut):
        sides = []
        if word == "从" and i + 1 < len(cut):
            sides.append((cut[i + 1], "from"))
        if word in ZH_GOING and i + 1 < len(cut):
            sides.append((cut[i + 1], "to"))
            if i > 0:
                sides.append((cut[i - 1], "from"))
        for (noun, pos), side in sides:
            if pos.startswith("n"):
                found.setdefault(noun, set()).add(side)
    return {noun: next(iter(s)) for noun, s in found.items() if len(s) == 1}


def words(text: str) -> list[Word]:
    """The question's words, English and Chinese, each with what protects it."""
    out: list[Word] = []
    for match in re.finditer(r"[\u3400-\u4dbf\u4e00-\u9fff]+|[A-Za-z]+(?:'[A-Za-z]+)?", text):
        chunk = match.group(0)
        if _CJK.match(chunk):
            at = match.start()
            for word, pos in _zh_cut(chunk):
                found = text.find(word, at)
                at = found + len(word) if found >= 0 else at
                out.append(Word(word, word, "zh", _zh_protected(word, pos), found,
                                found + len(word)))
        else:
            first = not text[: match.start()].strip(" ¿¡\"'(")
            key = stem(re.sub(r"'s$", "", chunk.lower()))  # Anna's: Anna, owning something
            out.append(Word(chunk, key, "en", _en_protected(chunk, first), match.start(),
                            match.end()))
    return out


def _zh_cut(chunk: str) -> list[tuple[str, str]]:
    """jieba's words, with 有 + 的 before a noun read as one word, 有的 ("some"): jieba cuts
    有的银行 as 有 / 的 / 银行, and both are light words."""
    cut = list(word_sense.zh_words(chunk))
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(cut):
        if (cut[i][0] == "有" and i + 2 < len(cut) and cut[i + 1][0] == "的"
                and cut[i + 2][1].startswith("n")):
            out.append(("有的", "r"))
            i += 2
            continue
        out.append(cut[i])
        i += 1
    return out


def _en_protected(word: str, first: bool) -> str | None:
    low = word.lower()
    if word[:1].isupper() and not first and low not in ("i",):
        return "a name"
    if low in EN_MODALS or low in EN_TENSE:
        return "a modal or tense"
    if low in EN_QUANTIFIERS:
        return "a quantifier"
    return None


def _zh_protected(word: str, pos: str) -> str | None:
    if any(ch in word for ch in ZH_NEGATION_CHARS):
        return "a word holding a negation"  # 时别 (jieba): the 别 must stay where it is
    if word in _ZH_SLOTS.values() or word in ZH_MODALS:
        return None  # a question word is its slot; a modal pairs only with its own class
    if pos in word_sense.PROTECTED_POS:
        return "a name or a time"
    if word in ZH_ASPECT:
        return "a tense"
    if word in ZH_QUANTIFIERS or (len(word) > 1 and word[0] in "每各"):
        return "a quantifier"  # 每天 / 每周: every day is not every week (jieba: pronouns)
    return None


def _light(word: Word) -> bool:
    """Words left out of the pairing: particles and auxiliaries, and negations (the strict
    reading counts those, an antonym pair included)."""
    if word.lang == "zh":
        return word.key in ZH_LIGHT or word.key in ZH_NEGATIONS
    low = word.text.lower()
    return low in EN_LIGHT or low in EN_NEGATIONS or low.endswith("n't")


def differing(a: str, b: str) -> tuple[list[Word], list[Word]]:
    """The words of ``a`` and of ``b`` the other lacks (light words aside)."""
    wa, wb = words(a), words(b)
    ca = Counter(w.key for w in wa if not _light(w))
    cb = Counter(w.key for w in wb if not _light(w))
    only_a, only_b = ca - cb, cb - ca
    return _pick(wa, only_a), _pick(wb, only_b)


def _pick(ws: list[Word], wanted: Counter[str]) -> list[Word]:
    left = Counter(wanted)
    out = []
    for w in ws:
        if not _light(w) and left[w.key] > 0:
            out.append(w)
            left[w.key] -= 1
    return out


def zh_words_to_judge(a: str, b: str) -> list[str]:
    """The Chinese words a judge would be asked about (to embed them first)."""
    da, db = differing(canonical(a), canonical(b))
    found = [w.text for w in da + db if w.lang == "zh" and w.protected is None]
    cores = [c for x in found for y in found for c in _cores(x, y)]
    return sorted(set(found) | set(cores))


def zh_opposed(x: str, y: str) -> bool:
    if any({x, y} <= pair for pair in _ZH_OPPOSITE_WORDS):
        return True
    for p, q in _ZH_OPPOSITE:
        if (p in x and q in y and q not in x and p not in y) or \
                (q in x and p in y and p not in x and q not in y):
            return True
    return False


def _zh_pair(x: Word, y: Word, judge: Judge | None) -> str | None:
    """How two Chinese words agree ("antonym" when they oppose), or None."""
    if zh_opposed(x.text, y.text):
        return "antonym"
    if x.text in ZH_MODALS or y.text in ZH_MODALS:
        same = any(x.text in g and y.text in g for g in ZH_MODAL_CLASSES)
        return "modal" if same else None
    if x.text in _ZH_SLOTS.values() or y.text in _ZH_SLOTS.values():
        return None  # a question word asks for its own slot
    if x.text.endswith(y.text) or y.text.endswith(x.text):
        return None  # 总裁 / 副总裁, 作用 / 副作用: a kind of it, not it (电话 / 电话号码 may be)
    if x.text in ZH_KIN or y.text in ZH_KIN:
        same = any(x.text in g and y.text in g for g in ZH_SAME_KIN)
        return "kin" if same else None
    sense = word_sense.zh_sense(x.text, y.text)
    if sense == "same":
        return "synonym"
    if sense == "related":
        return None  # 沸点 / 熔点: two kinds of one thing
    if judge is not None and judge(*_cores(x.text, y.text)):
        return "similar"
    return None


def _cores(x: str, y: str) -> tuple[str, str]:
    """What the embedding model compares of two Chinese words: the words that differ when
    both begin or end alike with whole words left (坐飞机 / 坐火车: 飞机 / 火车, which it
    scores apart, 0.88, where the joined ones read alike, 0.93), else the words (本名 /
    真名: 本 / 真 mean nothing alone)."""
    head = len(os.path.commonprefix([x, y]))
    tail = len(os.path.commonprefix([x[head:][::-1], y[head:][::-1]]))
    cx, cy = x[head : len(x) - tail], y[head : len(y) - tail]
    return (cx, cy) if (head or tail) and len(cx) >= 2 and len(cy) >= 2 else (x, y)


Unit = tuple[str, list[Word], int, int]  # joined words, the differing ones, span


def _en_units(ws: list[Word], text: str) -> list[Unit]:
    """Runs of three or two words (with light words between, as in "get to know") joined
    for WordNet, longest first, then each differing word alone."""
    units: list[Unit] = []
    tokens = [w for w in words(text) if w.lang == "en"]
    for n in (3, 2):
        for i in range(len(tokens) - n + 1):
            run = tokens[i : i + n]
            starts = {w.start for w in run}
            inside = [w for w in ws if w.start in starts]  # the differing words themselves
            if inside and all(w.start in {x.start for x in inside} or _light(w) for w in run):
                units.append(("_".join(w.text.lower() for w in run), inside, run[0].start,
                              run[-1].end))
    units += [(w.text.lower(), [w], w.start, w.end) for w in ws]
    return units


def reconcile(a: str, b: str, judge: Judge | None = None,
              sentences: SentenceJudge | None = None,
              rewording: RewordingJudge | None = None) -> Reconciled | str:
    """``a`` and ``b`` rewritten so that their differing words agree, or why they cannot.

    English words WordNet does not pair may still be read as one wording by ``sentences``
    (a sentence model over the two whole questions): only when what is left on each side is
    one or two open-class words (verbs, adjectives, adverbs by WordNet's counts; never a
    noun, a name, a measure or time, a question word, an ordinal or a word of amount), so a
    different thing, person, time or slot is never bridged, and the strict reading still
    compares numbers, negations, tense and roles afterwards."""
    ca, cb = canonical(a), canonical(b)
    da, db = differing(ca, cb)
    pairs: list[tuple[str, str, str]] = []
    edits: list[tuple[int, int, str]] = []  # spans of b and what replaces them
    used_a: set[int] = set()
    used_b: set[int] = set()
    for unit_b, wb, b0, b1 in _en_units([w for w in db if w.lang == "en"], cb):
        if any(id(w) in used_b for w in wb) or not _pairable(wb):
            continue
        for unit_a, wa, a0, a1 in _en_units([w for w in da if w.lang == "en"], ca):
            if any(id(w) in used_a for w in wa) or not _pairable(wa):
                continue
            how = _en_pair(unit_a, unit_b, named=any(w.protected for w in wa + wb))
            if how is None:
                continue
            pairs.append((unit_a.replace("_", " "), unit_b.replace("_", " "), how))
            used_a.update(id(w) for w in wa)
            used_b.update(id(w) for w in wb)
            edits.append((b0, b1, ("not " if how == "antonym" else "") + ca[a0:a1]))
            break
    for y in (w for w in db if w.lang == "zh" and w.protected is None):
        for x in (w for w in da if w.lang == "zh" and w.protected is None):
            if id(x) in used_a:
                continue
            how = _zh_pair(x, y, judge)
            if how is None:
                continue
            pairs.append((x.text, y.text, how))
            used_a.add(id(x))
            used_b.add(id(y))
            edits.append((y.start, y.end, ("不" if how == "antonym" else "") + x.text))
            break
    edits_a: list[tuple[int, int, str]] = []
    for side, other, used, out in ((db, ca, used_b, edits), (da, cb, used_a, edits_a)):
        for word in (w for w in side if w.lang == "zh" and id(w) not in used and not w.protected):
            light = _light_synonym(word, other)
            if light is not None:  # 位于 / 在: a word the other side says with a light one
                pairs.append((light, word.text, "synonym"))
                used.add(id(word))
                out.append((word.start, word.end, light))
    left_a = [w for w in da if id(w) not in used_a]
    left_b = [w for w in db if id(w) not in used_b]
    if left_a or left_b:
        verdict = _sentence_verdict(a, b, left_a, left_b, sentences)
        how = "paraphrase"
        if verdict is not True:
            reworded = _rewording_verdict(a, b, left_a, left_b, rewording)
            if reworded is not True:
                return (f"terms differ: {' '.join(w.text for w in left_a) or '-'!r} vs "
                        f"{' '.join(w.text for w in left_b) or '-'!r}" + _protection(da + db)
                        + (verdict or "") + (reworded or ""))
            how = "rewording"
        said_a, said_b = (" ".join(w.text for w in side) for side in (left_a, left_b))
        pairs.append((said_a, said_b, how))
        if not (left_a and left_b):  # words one side adds: read as saying nothing more
            said_a = ""
        edits.extend((w.start, w.end, said_a if i == 0 else "") for i, w in enumerate(left_b))
        edits_a.extend((w.start, w.end, said_a if i == 0 else "") for i, w in enumerate(left_a))
    vetoed = _vetoed(a, b, pairs, rewording)
    if vetoed is not None:
        return vetoed
    ra, rb = _rewrite(ca, edits_a), _rewrite(cb, edits)
    extra_a, extra_b = _extra_light(ra, rb)
    return Reconciled(_rewrite(ra, extra_a), _rewrite(rb, extra_b), tuple(pairs))


def _pairable(ws: list[Word]) -> bool:
    """Whether WordNet may pair these words with others: none protected, but for names."""
    return all(w.protected in (None, "a name") for w in ws)


def _en_pair(x: str, y: str, named: bool) -> str | None:
    """How two English words or runs agree by WordNet ("antonym", "synonym") or None. A
    name pairs only with a name of its own sense: UK / United Kingdom, CEO / chief
    executive officer, US / America (never an opposite or a related one)."""
    if named:
        return "synonym" if word_sense.synonyms(x, y, word_sense.NAME_SHARE) else None
    if word_sense.antonyms(x, y):
        return "antonym"
    return "synonym" if word_sense.synonyms(x, y) else None


def _sentence_verdict(a: str, b: str, left_a: list[Word], left_b: list[Word],
                      sentences: SentenceJudge | None) -> bool | str | None:
    """True when the sentence model reads ``a`` and ``b`` as one question and the words
    left unpaired are ones it may bridge; otherwise what to add to the refusal (None when
    the model was not asked)."""
    if sentences is None or not (1 <= len(left_a) <= 2 and 1 <= len(left_b) <= 2):
        return None
    if not all(_bridgeable(w) for w in left_a + left_b):
        return None
    score = sentences.similarity(a, b)
    if score >= sentences.threshold:
        return True
    return f" (paraphrase model {score:.3f} < {sentences.threshold:.3f})"


def _rewording_verdict(a: str, b: str, left_a: list[Word], left_b: list[Word],
                       rewording: RewordingJudge | None) -> bool | str | None:
    """True when the rewording model reads ``a`` and ``b`` as one question and every word
    left unpaired is one it may read; otherwise what to add to the refusal (None: not
    asked)."""
    if rewording is None or rewording.threshold > 1 or not all(
            _rewordable(w) or (i > 0 and _particle(side[i - 1], w))
            for side in (left_a, left_b) for i, w in enumerate(side)):
        return None
    score = rewording.score(a, b)
    if score >= rewording.threshold:
        return True
    return f" (rewording model {score:.3f} < {rewording.threshold:.3f})"


def _rewordable(word: Word) -> bool:
    """A word left unpaired that the rewording model may read: nothing protected (a name,
    number, time, negation, quantifier, modal); in English no closed-class word (a question
    word, an amount, how often, an ordinal), preposition (before / after), measure, unit or
    time; in Chinese no word that is or begins with a modal or an aspect word (能用 / 需要,
    已经 / 还剩: what one can do or has done is not what one needs or has left)."""
    if word.protected:
        return False
    low = word.text.lower()
    if word.lang == "en":
        return (low.isalpha() and low not in EN_CLOSED and low not in EN_PREPOSITIONS
                and not word_sense.names_a_measure(low))
    return not word.text.startswith(_ZH_NOT_REWORDABLE)


def _particle(verb: Word, word: Word) -> bool:
    """``up`` in "sign up", ``after`` in "look after": a verb's particle, not a preposition
    (WordNet lists the two as one verb)."""
    return (word.lang == verb.lang == "en" and word.text.lower() in EN_PREPOSITIONS
            and word_sense.part_of_speech(f"{verb.text}_{word.text}".lower()) == "v")


def _vetoed(a: str, b: str, pairs: list[tuple[str, str, str]],
            rewording: RewordingJudge | None) -> str | None:
    """Why words paired only as alike ("similar": the embedding's cosine; "paraphrase": the
    English sentence model) do not stand: the rewording model, reading both questions
    whole, is sure they ask different things. None when they stand or nobody asked."""
    alike = [(x, y) for x, y, how in pairs if how in ("similar", "paraphrase")]
    if rewording is None or not alike or rewording.veto <= 0:
        return None
    score = rewording.score(a, b)
    if score >= rewording.veto:
        return None
    x, y = alike[0]
    return (f"terms differ: {x!r} vs {y!r} (read alike, but the rewording model reads "
            f"another question: {score:.3f} < {rewording.veto:.3f})")


def _bridgeable(word: Word) -> bool:
    low = word.text.lower()
    if word.lang != "en" or word.protected or low in EN_CLOSED or not low.isalpha():
        return False
    return (word_sense.part_of_speech(low) in ("v", "a", "r")
            and not word_sense.names_a_measure(low))


def _extra_light(a: str, b: str) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]:
    """The light words one side has more of than the other (有, 于, 由, ever), cut out of
    that side: they were left out of the pairing, so the strict reading leaves them too."""
    wa, wb = [w for w in words(a) if _cuttable(w)], [w for w in words(b) if _cuttable(w)]
    ca, cb = Counter(w.key for w in wa), Counter(w.key for w in wb)
    more_a, more_b = ca - cb, cb - ca
    return _cut(wa, more_a), _cut(wb, more_b)


def _cuttable(word: Word) -> bool:
    """A light word that carries no structure: Chinese particles and light verbs, English
    fillers (never an auxiliary: "who did Maria hire" asks for the object)."""
    if word.lang == "en":
        return word.text.lower() in EN_FILLER_WORDS
    return _light(word) and not _negation(word)


def _negation(word: Word) -> bool:
    low = word.text.lower()
    return word.key in ZH_NEGATIONS or low in EN_NEGATIONS or low.endswith("n't")


def _cut(ws: list[Word], extra: Counter[str]) -> list[tuple[int, int, str]]:
    out = []
    for w in reversed(ws):  # the last ones: a question's own 有 or 是 comes first
        if extra[w.key] > 0:
            out.append((w.start, w.end, ""))
            extra[w.key] -= 1
    return out


def _light_synonym(word: Word, other: str) -> str | None:
    """A light word of ``other`` (在, 是...) that Cilin puts in ``word``'s synonym group."""
    for text, _ in word_sense.zh_words(other):
        if text in ZH_LIGHT and word_sense.zh_sense(word.text, text) == "same":
            return text
    return None


def _protection(ws: list[Word]) -> str:
    said = [f"{w.text!r} is {w.protected}" for w in ws if w.protected]
    return f" ({'; '.join(said[:3])})" if said else ""


def _rewrite(text: str, edits: list[tuple[int, int, str]]) -> str:
    """``text`` with each paired span replaced by the other side's words (an antonym by
    their negation: 不 X, not X)."""
    out = text
    for start, end, repl in sorted(edits, key=lambda e: -e[0]):
        out = out[:start] + repl + out[end:]
    return out
