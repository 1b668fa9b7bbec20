"""Word lists for the answer cache's same-question guard (English and Chinese).

Small on purpose: a word missing here makes the cache miss (a recomputation),
never serve a wrong answer. Synonym groups map every member to the first one;
a word may sit in one group only.
"""

from __future__ import annotations


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


EN_SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("start", "begin", "commence"), ("buy", "purchase"), ("fix", "repair"),
    ("big", "large"), ("biggest", "largest"), ("get", "obtain", "receive"),
    ("shop", "store"), ("movie", "film"), ("what", "which"), ("who", "whom"),
    ("remove", "delete"), ("fast", "quick", "quickly", "rapid", "rapidly"),
    ("fastest", "quickest"), ("write", "author"), ("change", "modify", "alter"),
    ("end", "finish"), ("price", "cost"), ("company", "firm"), ("nearest", "closest"),
    ("symptom", "sign"), ("tap", "faucet"), ("help", "assist"), ("need", "require"),
    ("use", "utilize", "utilise"), ("show", "display"), ("answer", "reply"),
    ("car", "automobile"), ("now", "currently", "presently", "nowadays"),
)
# Two-word phrases read as one word (after fillers are dropped).
EN_PHRASES = {("what", "time"): "when", ("turn", "on"): "enable", ("turn", "off"): "disable",
              ("how", "come"): "why"}
# Irregular past forms, read as the verb (the stemmer handles -ed).
EN_IRREGULAR = {past: verb for verb, forms in (
    ("write", "wrote written"), ("begin", "began begun"), ("buy", "bought"), ("win", "won"),
    ("run", "ran"), ("take", "took taken"), ("give", "gave given"), ("make", "made"),
    ("find", "found"), ("go", "went gone"), ("see", "saw seen"), ("get", "got gotten"),
    ("tell", "told"), ("think", "thought"), ("sell", "sold"), ("build", "built"),
    ("pay", "paid"), ("leave", "left"), ("hold", "held"), ("lead", "led"), ("meet", "met"),
    ("speak", "spoke spoken"), ("choose", "chose chosen"), ("become", "became"),
    ("come", "came"), ("know", "knew known"), ("grow", "grew grown"), ("fly", "flew flown"),
    ("drive", "drove driven"), ("eat", "ate eaten"), ("fall", "fell fallen"),
    ("break", "broke broken"), ("steal", "stole stolen"), ("lose", "lost"), ("send", "sent"),
    ("spend", "spent"), ("teach", "taught"), ("catch", "caught"), ("bring", "brought"),
    ("fight", "fought"), ("sing", "sang sung"), ("drink", "drank drunk"), ("swim", "swam swum"),
    ("rise", "rose risen"), ("wear", "wore worn"), ("hide", "hid hidden"),
    ("forget", "forgot forgotten"), ("understand", "understood"), ("stand", "stood"),
    ("sit", "sat"), ("shake", "shook shaken"), ("draw", "drew drawn"), ("throw", "threw thrown"),
) for past in _words(forms)}
# Modals that ask for a way or a place, not a permission, after a question word:
# "how can I reset" is "how do I reset".
EN_WAY_MODALS = frozenset({"can", "could", "may"})
EN_SUBJECT_PRONOUNS = frozenset({"i", "we", "you", "one"})
EN_DO = frozenset({"do", "does", "did"})
# Polite or empty phrases, removed as whole token runs before comparing.
EN_FILLERS: tuple[tuple[str, ...], ...] = tuple(_words(p) for p in (
    "could you please tell me", "could you tell me", "can you tell me", "please tell me",
    "would you tell me", "do you know", "i would like to know", "i'd like to know",
    "i want to know", "i wonder", "just wondering", "excuse me", "thank you", "thanks",
    "please", "kindly", "hi", "hello", "hey", "actually", "exactly", "really", "just",
    "located",
))
# Words that carry no content of their own (auxiliaries, articles, pronouns,
# prepositions without direction; tense auxiliaries, "will" among them: the tense is compared
# on its own). Question words, modals, comparatives and
# directional prepositions (to, from, before...) are content and stay.
EN_STOPWORDS = frozenset(_words("""a an the is are was were be been being am do does did done
of in on at for with by about as and or it its this that these those there here i me my
we us our you your he him his she her they them their have has had will shall"""))
EN_NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither",
                          "nor", "without", "cannot", "nowhere", "lack", "lacks", "lacking",
                          "lacked"})
# Words that place a question in time or space; moving them keeps its meaning.
EN_FREE = frozenset({"today", "now", "yesterday", "tomorrow", "tonight"})
EN_PP_STARTS = frozenset({"in", "at", "on", "during"})
EN_UNITS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
EN_TENS = {w: 10 * (i + 2) for i, w in enumerate(
    ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"])}
EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}

# Chinese: replaced in the text, longest first, before anything else.
ZH_SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("什么时候", "何时"), ("为什么", "为何"), ("怎么", "如何", "怎样"), ("哪里", "哪儿"),
    ("买", "购买"), ("现在", "目前", "当前", "如今"), ("电脑", "计算机"), ("药店", "药房"),
    ("申请", "办理"), ("价格", "价钱"), ("谁", "哪位"), ("什么", "哪些"), ("明天", "明日"),
    ("大概", "大约"), ("电影", "影片"), ("员工", "职员"), ("用", "使用"),
    ("未来", "今后", "将来"), ("别名", "别称"), ("区别", "差别", "不同"), ("很", "非常"),
    ("修改", "更改"),
)
# Polite or empty words, removed from the text (after synonyms); then the particles.
ZH_FILLERS = ("麻烦问一下", "请问一下", "打扰一下", "能告诉我", "请告诉我", "我想知道", "你知道",
              "请问", "问一下", "你好", "您好", "谢谢", "那个,", "一下")
ZH_FILLER_CHARS = frozenset("吗呢吧啊呀了的")
# Negation words. Longer words first; the exceptions contain a negation character
# but are not negations (alias, future, difference, very...), so they are read first.
ZH_NEGATIONS = ("从来没有", "从未", "从不", "没有", "未曾", "无法", "并非", "毫无", "不", "没",
                "未", "别", "非", "无", "勿", "莫")
ZH_NOT_NEGATIONS = ("别名", "别人", "别的", "区别", "类别", "分别", "级别", "性别", "告别",
                    "识别", "特别", "个别", "辨别", "未来", "无论", "不仅", "不过", "不管",
                    "差不多", "无线", "莫名", "非洲")
# Words with a numeral character that are not numbers; 哪一 is "which".
ZH_NOT_NUMBERS = ("一些", "一起", "一样", "一直", "一般", "一定", "一切", "统一", "万一", "唯一",
                  "一点")
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
             "七": 7, "八": 8, "九": 9}
ZH_SMALL_UNITS = {"十": 10, "百": 100, "千": 1000}
ZH_BIG_UNITS = {"万": 10**4, "亿": 10**8}
ZH_COUNTERS = "个位名只件条本张次颗"  # "3个" is "three"
ZH_DATE_UNITS = "年月日号"  # "2019年" travels with its number
# ...and the question words for why and when, which move freely in a Chinese question
# (为什么天空是蓝色的 = 天空为什么是蓝色的)
ZH_FREE = ("现在", "今天", "昨天", "明天", "今年", "去年", "明年", "为什么", "何时")
ZH_COPULA = "是"
ZH_PASSIVE = "被"
ZH_PREPOSITION = "在"
