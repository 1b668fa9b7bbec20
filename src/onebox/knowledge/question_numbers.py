"""Numbers in a question, normalised: digits, English number words, Chinese numerals.

    extract_numbers("can forty people fit in 2 halls")  # ("can   people fit in   halls", ["40", "2"])

``three``, ``3``, ``三`` and ``3个`` all read as 3, ``twenty-one`` and ``二十一`` as 21,
``a hundred and twenty`` as 120, ``一万五千`` as 15000. A date unit stays with its
number (``2019年``), a counter (``个``, ``位``...) is dropped, ``%`` becomes the word
``percent``. Words that merely contain a numeral (``一起``, ``万一``, ``哪一``) are not numbers.
"""

from __future__ import annotations

import re

from onebox.knowledge import question_lexicon as lex

_EN_WORD = "|".join(sorted([*lex.EN_UNITS, *lex.EN_TENS, *lex.EN_SCALES], key=len, reverse=True))
_SCALE = "|".join(lex.EN_SCALES)
_JOIN = "(?:" + "".join(f"(?<={s})\\s+and\\s+|" for s in lex.EN_SCALES) + r"[\s-]+)"
_EN_NUMBER = re.compile(
    rf"\b(?:an?\s+(?=(?:{_SCALE})\b))?(?:{_EN_WORD})(?:{_JOIN}(?:{_EN_WORD}))*\b")
_ZH_NUMERAL = "".join([*lex.ZH_DIGITS, *lex.ZH_SMALL_UNITS, *lex.ZH_BIG_UNITS])
# a sign is part of a number written after a space, a bracket or the start (-5 °C, 零下5度)
_NUMBER = re.compile(
    rf"((?:(?<![A-Za-z0-9_.])[-\u2212])?(?:\d+(?:[.,]\d+)*|[{_ZH_NUMERAL}]+))(%?)\s*"
    rf"([{lex.ZH_DATE_UNITS}]?)([{lex.ZH_COUNTERS}]?)")
_PROTECT = "\ue000"
# Inside Chinese text a number leaves a mark, so the run stays whole (张三的老师).
NUMBER_MARK = "\ue001"
DATE_MARK = "\ue002"
_CJK_CHAR = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")
_MARK_BASE = 0xE010  # each character of the number, shifted into the private-use area


def encode_mark(number: str) -> str:
    return "".join(chr(_MARK_BASE + ord(ch) - 0x20) for ch in number)


def decode_mark(mark: str) -> str:
    return "".join(chr(ord(ch) - _MARK_BASE + 0x20) for ch in mark)


def english_number(words: str) -> int:
    total = current = 0
    for word in re.split(r"[\s-]+", words):
        if word in lex.EN_UNITS:
            current += lex.EN_UNITS[word]
        elif word in lex.EN_TENS:
            current += lex.EN_TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in lex.EN_SCALES:
            total += max(current, 1) * lex.EN_SCALES[word]
            current = 0
    return total + current


def chinese_number(numeral: str) -> int:
    total = section = digit = 0
    for ch in numeral:
        if ch in lex.ZH_DIGITS:
            digit = lex.ZH_DIGITS[ch]
        elif ch in lex.ZH_SMALL_UNITS:
            section += max(digit, 1 if ch == "十" and not section else digit) * lex.ZH_SMALL_UNITS[ch]
            digit = 0
        else:
            total += (section + digit) * lex.ZH_BIG_UNITS[ch]
            section = digit = 0
    return total + section + digit


def _value(token: str) -> str:
    if token[0] in "-\u2212":
        return "-" + _value(token[1:])
    if token[0].isdigit():
        return token.replace(",", "")
    return str(chinese_number(token))


def _protect(text: str) -> str:
    text = text.replace("哪一", "哪")
    for word in lex.ZH_NOT_NUMBERS:
        text = text.replace(word, word.replace("一", _PROTECT).replace("万", _PROTECT + _PROTECT))
    return text


def _restore(text: str) -> str:
    return text.replace(_PROTECT + _PROTECT, "万").replace(_PROTECT, "一")


def extract_numbers(text: str) -> tuple[str, list[str]]:
    """``text`` with its numbers cut out, and the numbers as normalised strings.

    A number is replaced by a space, or next to Chinese by NUMBER_MARK or DATE_MARK and the
    number in private-use characters (:func:`encode_mark`), so the run stays whole."""
    found: list[str] = []

    def english(match: re.Match[str]) -> str:
        found.append(str(english_number(re.sub(r"^an?\s+|\band\b", " ", match.group(0)))))
        return " "

    def other(match: re.Match[str]) -> str:
        number, percent, date_unit, _counter = match.groups()
        found.append(_value(number) + date_unit)
        if percent:
            return " percent "
        near = match.string[max(match.start() - 1, 0) : match.end() + 1]
        if not _CJK_CHAR.search(near):
            return " "
        return (DATE_MARK if date_unit else NUMBER_MARK) + encode_mark(found[-1])

    text = _EN_NUMBER.sub(english, _protect(text.replace("零下", " -")))
    return _restore(_NUMBER.sub(other, text)), found
