"""When things happened: absolute dates and relative phrases, English and Chinese.

    parse_when("1:56 pm on 8 May, 2023")           # a session date, a CLI --at, an API field
    # TimeMention(at=2023-05-08 13:56 UTC, precision="minute", text="1:56 pm on 8 May, 2023")
    find_time("I went hiking yesterday", anchor)   # resolved against the turn's date
    # TimeMention(at=anchor - 1 day, precision="day", text="yesterday")
    describe(mention, now)                         # "on 7 May 2023 (2 years ago)"

Pure functions, no I/O. A mention has a precision (minute, day, week, month, year);
``window()`` is the span it stands for, so "last week" matches any day of that week.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from onebox.errors import ValidationError

Precision = Literal["minute", "day", "week", "month", "year"]
Relation = Literal["in", "before", "after", "since", "until"]
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
MONTHS = {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug",
                                           "sep", "oct", "nov", "dec"))}
WEEKDAYS = {d: i for i, d in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday",
                                        "saturday", "sunday"))}
EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
              "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
              "a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3}
ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
             "八": 8, "九": 9, "几": 3}
ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
UNIT_PRECISION: dict[str, Precision] = {"day": "day", "week": "week", "month": "month", "year": "year"}
ZH_UNITS = {"天": "day", "日": "day", "周": "week", "星期": "week", "个星期": "week", "礼拜": "week",
            "个礼拜": "week", "月": "month", "个月": "month", "年": "year"}

_MON = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_NUM = r"(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|(?:a )?couple of|(?:a )?few|several)"
_ZH_NUM = r"([0-9]+|[一二两三四五六七八九十几]+)"


@dataclass(frozen=True)
class TimeMention:
    at: datetime
    precision: Precision
    text: str
    relation: Relation = "in"  # "before May 2023", "2023年5月之后", "since last year"

    def window(self) -> tuple[datetime, datetime]:
        """The span this mention stands for, [start, end): its period, or the open span
        before/after it ("before May 2023" is everything up to 1 May 2023)."""
        start, end = span(self.at, self.precision)
        return {"in": (start, end), "before": (EARLIEST, start), "after": (end, LATEST),
                "since": (start, LATEST), "until": (EARLIEST, end)}[self.relation]


def span(at: datetime, precision: str) -> tuple[datetime, datetime]:
    day = datetime(at.year, at.month, at.day, tzinfo=UTC)
    if precision == "minute":
        return at, at + timedelta(minutes=1)
    if precision == "day":
        return day, day + timedelta(days=1)
    if precision == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if precision == "month":
        start = day.replace(day=1)
        return start, add_months(start, 1)
    start = day.replace(month=1, day=1)
    return start, start.replace(year=start.year + 1)


def add_months(at: datetime, months: int) -> datetime:
    index = at.year * 12 + at.month - 1 + months
    year, month = divmod(index, 12)
    last = (date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1) - timedelta(days=1)).day
    return at.replace(year=year, month=month + 1, day=min(at.day, last))


def shift(anchor: datetime, unit: str, n: int) -> datetime:
    if unit == "day":
        return anchor + timedelta(days=n)
    if unit == "week":
        return anchor + timedelta(weeks=n)
    if unit == "month":
        return add_months(anchor, n)
    return add_months(anchor, 12 * n)


def zh_number(text: str) -> int:
    """Digits or a Chinese numeral up to 99 (三, 十二, 二十, 两)."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return ZH_DIGITS.get(tens, 1) * 10 + ZH_DIGITS.get(ones, 0)
    return ZH_DIGITS.get(text, 1)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _hour(hour: str | None, minute: str | None, half: str | None) -> tuple[int, int] | None:
    if hour is None:
        return None
    h = int(hour) % 12 + (12 if half and half.lower() == "p" else 0)
    return h, int(minute or 0)


def _absolute(match: re.Match[str], kind: str) -> tuple[datetime, Precision]:
    g = match.groupdict()
    year = int(g["year"])
    month = MONTHS[g["mon"].lower()[:3]] if g.get("mon") else int(g.get("month") or 1)
    day = int(g.get("day") or 1)
    clock = _hour(g.get("hour"), g.get("minute"), g.get("half"))
    at = datetime(year, month, day, *(clock or (0, 0)), tzinfo=UTC)
    precision: Precision = "minute" if clock else ("day" if g.get("day") else kind)  # type: ignore[assignment]
    return at, precision


ABSOLUTE: list[tuple[re.Pattern[str], Precision]] = [
    (re.compile(r"(?<!\d)(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})(?!\d)"), "day"),
    (re.compile(r"(?:(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<half>[ap])\.?m\.?\s*(?:on\s+)?)?"
                r"\b(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mon>" + _MON[1:-1] + r")\.?,?\s+(?P<year>\d{4})\b",
                re.I), "day"),
    (re.compile(r"\b(?P<mon>" + _MON[1:-1] + r")\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<year>\d{4})\b",
                re.I), "day"),
    (re.compile(r"\b(?P<mon>" + _MON[1:-1] + r")\.?,?\s+(?:of\s+)?(?P<year>\d{4})\b", re.I), "month"),
    (re.compile(r"(?P<year>\d{4})\s*年\s*(?P<month>\d{1,2})\s*月\s*(?:(?P<day>\d{1,2})\s*[日号])?"), "month"),
    (re.compile(r"(?P<year>\d{4})\s*年(?![\d\s]*月)"), "year"),
    (re.compile(r"\b(?:in|since|during|of|before|after|until|by)\s+(?P<year>(?:19|20)\d{2})\b", re.I),
     "year"),
]


def _en_count(word: str) -> int:
    return int(word) if word.isdigit() else EN_NUMBERS[word.lower()]


def _unit(word: str) -> str:
    return "week" if word.lower().startswith("weekend") else word.lower().rstrip("s")


def _previous_weekday(anchor: datetime, weekday: int) -> datetime:
    return anchor - timedelta(days=(anchor.weekday() - weekday - 1) % 7 + 1)


Resolved = tuple[datetime, Precision]
_DAY_WORDS = {"the day before yesterday": -2, "day before yesterday": -2, "yesterday": -1,
              "last night": -1, "today": 0, "tonight": 0, "this morning": 0,
              "this afternoon": 0, "this evening": 0, "tomorrow": 1, "前天": -2, "昨天": -1,
              "昨晚": -1, "昨日": -1, "今天": 0, "今晚": 0, "今日": 0, "明天": 1, "后天": 2}
_ZH_RELATIVE = {"上周": ("week", -1), "上个星期": ("week", -1), "上星期": ("week", -1),
                "上个礼拜": ("week", -1), "这周": ("week", 0), "本周": ("week", 0),
                "下周": ("week", 1), "下个星期": ("week", 1), "上个月": ("month", -1),
                "上月": ("month", -1), "这个月": ("month", 0), "本月": ("month", 0),
                "下个月": ("month", 1), "去年": ("year", -1), "前年": ("year", -2),
                "今年": ("year", 0), "明年": ("year", 1)}
_STEP = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1}


def _day_word(m: re.Match[str], anchor: datetime) -> Resolved:
    return anchor + timedelta(days=_DAY_WORDS[m.group(0).lower()]), "day"


def _en_step(m: re.Match[str], anchor: datetime) -> Resolved:
    unit = _unit(m.group(2))
    at = shift(anchor, unit, _STEP[m.group(1).lower()])
    if m.group(2).lower() == "weekend":
        at = _previous_weekday(anchor, 5) if _STEP[m.group(1).lower()] < 0 else at
    return at, UNIT_PRECISION[unit]


def _en_ago(m: re.Match[str], anchor: datetime) -> Resolved:
    unit = _unit(m.group(2))
    return shift(anchor, unit, -_en_count(m.group(1))), UNIT_PRECISION[unit]


def _en_in(m: re.Match[str], anchor: datetime) -> Resolved:
    unit = _unit(m.group(2))
    return shift(anchor, unit, _en_count(m.group(1))), UNIT_PRECISION[unit]


def _zh_ago(m: re.Match[str], anchor: datetime) -> Resolved:
    unit = ZH_UNITS[m.group(2)]
    sign = 1 if m.group(3) in ("后", "以后", "之后") else -1
    return shift(anchor, unit, sign * zh_number(m.group(1))), UNIT_PRECISION[unit]


def _zh_step(m: re.Match[str], anchor: datetime) -> Resolved:
    unit, n = _ZH_RELATIVE[m.group(0)]
    return shift(anchor, unit, n), UNIT_PRECISION[unit]


def _zh_weekday(m: re.Match[str], anchor: datetime) -> Resolved:
    monday = anchor - timedelta(days=anchor.weekday())
    weeks = {"上": -1, "这": 0, "本": 0, "下": 1}[m.group(1)]
    return monday + timedelta(weeks=weeks, days=ZH_WEEKDAYS[m.group(2)]), "day"


_FUTURE = re.compile(r"(?:\b(?:am|is|are)|'m|'re)\s+going\b|\b(?:will|won't|shall|going to|gonna|plan(?:s|ned|ning)? to|hope to|"
                     r"about to|upcoming|next)\b|\w'll\b|打算|计划|准备|将要|将会|要去|会去|想去", re.I)
_MONTH_WORDS = _MON[1:-1].replace("may|", "")  # "may" is a verb: only "May" names the month
_EN_MONTH = r"((?i:" + _MONTH_WORDS + r")|May)"
_ZH_MONTH_NUM = r"(1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])"
_ZH_YEAR_STEP = {"前年": -2, "去年": -1, "今年": 0, "明年": 1}


def future_tense(text: str) -> bool:
    """The sentence talks about what is to come ("will", "going to", "打算")."""
    return _FUTURE.search(text) is not None


def _month_year(anchor: datetime, month: int, step: str, text: str) -> int:
    """The year of a month named without one: "last May" before the anchor's month, "next
    May" after it, "this May" in its year; else the nearest May in the text's tense."""
    step = step.lower()
    if step == "this":
        return anchor.year
    ahead = step == "next" or (step != "last" and future_tense(text))
    if ahead:
        return anchor.year if month > anchor.month or (step != "next" and month == anchor.month) \
            else anchor.year + 1
    return anchor.year if month < anchor.month or (step != "last" and month == anchor.month) \
        else anchor.year - 1


def _en_month(m: re.Match[str], anchor: datetime) -> Resolved:
    month = MONTHS[m.group(2).lower()[:3]]
    year = _month_year(anchor, month, m.group(1), m.string)
    return datetime(year, month, 1, tzinfo=UTC), "month"


def _en_month_day(m: re.Match[str], anchor: datetime) -> Resolved:
    g = m.groupdict()
    month = MONTHS[(g["m1"] or g["m2"]).lower()[:3]]
    year = _month_year(anchor, month, "", m.string)
    return datetime(year, month, int(g["d1"] or g["d2"]), tzinfo=UTC), "day"


def _zh_month(m: re.Match[str], anchor: datetime) -> Resolved:
    month = zh_number(m.group(2))
    if m.group(1):
        year = anchor.year + _ZH_YEAR_STEP[m.group(1)]
    else:
        year = _month_year(anchor, month, "", m.string)
    if m.group(3):
        return datetime(year, month, zh_number(m.group(3)), tzinfo=UTC), "day"
    return datetime(year, month, 1, tzinfo=UTC), "month"


def _en_weekday_step(m: re.Match[str], anchor: datetime) -> Resolved:
    """ "next Friday" / "on Friday" said of the future: the coming one; else the last one."""
    step, weekday = m.group(1).lower(), WEEKDAYS[m.group(2).lower()]
    if step == "next" or (step in ("on", "this") and future_tense(m.string)):
        return anchor + timedelta(days=(weekday - anchor.weekday() - 1) % 7 + 1), "day"
    return _previous_weekday(anchor, weekday), "day"


_EN_DAY_WORDS = "|".join(sorted((w for w in _DAY_WORDS if w.isascii()), key=len, reverse=True))
RELATIVE = [
    (re.compile(r"\b(?:" + _EN_DAY_WORDS + r")\b", re.I), _day_word),
    (re.compile(r"\b" + _NUM + r"\s+(day|week|month|year)s?\s+ago\b", re.I), _en_ago),
    (re.compile(r"\b(last|past|previous|this|next)\s+(weekend|week|month|year)\b", re.I), _en_step),
    (re.compile(r"\bin\s+" + _NUM + r"\s+(day|week|month|year)s?(?!\s+ago)\b", re.I), _en_in),
    (re.compile(r"\b(last|next|this|on)\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
                r"(?!s)\b", re.I), _en_weekday_step),
    (re.compile(r"\b((?i:in|last|this|next|since|during|until|by|early|late|mid|of))\s+"
                r"(?:(?i:early|late|mid)-?\s*)?" + _EN_MONTH + r"\b\.?(?!\s*\d)"), _en_month),
    (re.compile(r"\b(?P<m1>" + _EN_MONTH[1:-1] + r")\.?\s+(?P<d1>\d{1,2})(?:st|nd|rd|th)?\b(?!:)|"
                r"\b(?P<d2>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m2>" + _EN_MONTH[1:-1] + r")\b"),
     _en_month_day),
    (re.compile(r"(上|这|本|下)(?:个)?(?:周|星期|礼拜)([一二三四五六日天])"), _zh_weekday),
    (re.compile(_ZH_NUM + r"(个星期|个礼拜|个月|星期|礼拜|天|日|周|月|年)(前|以前|之前|后|以后|之后)"), _zh_ago),
    (re.compile(r"(?:(前年|去年|今年|明年)|(?<![0-9年]))" + _ZH_MONTH_NUM + r"月份?"
                r"(?:([0-9]{1,2}|[一二三]?十[一二三四五六七八九]?|[一二三四五六七八九])[日号])?"), _zh_month),
    (re.compile("|".join(sorted(_ZH_RELATIVE, key=len, reverse=True))), _zh_step),
    (re.compile("|".join(w for w in _DAY_WORDS if not w.isascii())), _day_word),
]


def find_time(text: str, anchor: datetime) -> TimeMention | None:
    """The first time expression in ``text`` (absolute first, then relative to ``anchor``),
    with its relation ("before May 2023" -> ``relation="before"``)."""
    anchor = _utc(anchor)
    found = _absolutes(text) or _relatives(text, anchor)
    if not found:
        return None
    start, end, mention = min(found, key=lambda f: f[0])
    relation = relation_of(text, start, end)
    return TimeMention(mention.at, mention.precision, mention.text, relation)


Found = list[tuple[int, int, TimeMention]]


def _absolutes(text: str) -> Found:
    found: Found = []
    for pattern, kind in ABSOLUTE:
        for m in pattern.finditer(text):
            try:
                at, precision = _absolute(m, kind)
            except (ValueError, KeyError, OverflowError):
                continue
            found.append((m.start(), m.end(), TimeMention(at, precision, m.group(0).strip())))
            break
    return found


def _relatives(text: str, anchor: datetime) -> Found:
    found: Found = []
    for rel, resolve in RELATIVE:
        hit = rel.search(text)
        if hit:
            try:
                at, precision = resolve(hit, anchor)
            except (ValueError, KeyError, OverflowError):
                continue  # "in 50000 years", "31 February": out of the calendar, not a time
            found.append((hit.start(), hit.end(), TimeMention(at, precision, hit.group(0))))
    return found


_EN_RELATION = re.compile(r"\b(before|prior to|earlier than|after|later than|since|until|till|"
                          r"up to|by)\s+(?:the\s+)?$", re.I)
_ZH_AFTER = re.compile(r"^\s*(之前|以前|前(?![往进去来])|之后|以后|后(?![来面])|以来|起(?![床来]))")
_ZH_BEFORE = re.compile(r"(自从|自|从|直到|到)\s*$")
_RELATION_WORDS: dict[str, Relation] = {
    "before": "before", "prior to": "before", "earlier than": "before", "after": "after",
    "later than": "after", "since": "since", "until": "until", "till": "until",
    "up to": "until", "by": "until", "之前": "before", "以前": "before", "前": "before",
    "之后": "after", "以后": "after", "后": "after", "以来": "since", "起": "since",
    "自从": "since", "自": "since", "从": "since", "直到": "until", "到": "until"}


def relation_of(text: str, start: int, end: int) -> Relation:
    """How a sentence relates to the time it names: in it, before/after/since/until it."""
    mention = text[start:end]
    first = re.match(r"(before|after|since|until|by)\s", mention, re.I)
    en = first or _EN_RELATION.search(text[max(0, start - 20):start])
    zh = _ZH_AFTER.match(text[end:end + 4]) or _ZH_BEFORE.search(text[max(0, start - 3):start])
    if mention.endswith(("前", "后")) or not (en or zh):
        return "in"  # "三年前" is a time, not "before three years"
    word = (en or zh).group(1).lower()  # type: ignore[union-attr]
    return _RELATION_WORDS.get(word, "in")


def parse_when(value: str | datetime, field: str = "happened_at") -> TimeMention:
    """An absolute date (ISO 8601, "8 May 2023", "1:56 pm on 8 May, 2023", "2023年5月8日")."""
    if isinstance(value, datetime):
        return TimeMention(_utc(value), "minute", value.isoformat())
    text = str(value).strip()
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return TimeMention(_utc(at), "day" if len(text) <= 10 else "minute", text)
    except ValueError:
        pass
    mention = find_time(text, datetime.now(UTC)) if text else None
    if mention is None or mention.text not in text or len(mention.text) < len(text) - 3:
        raise ValidationError(
            f"{field}: {text!r} is not a date; give ISO 8601 such as 2023-05-08 or "
            "2023-05-08T13:56:00Z (also accepted: '8 May 2023', '2023年5月8日')", field=field)
    return mention


WHEN_QUESTION = re.compile(
    r"\b(?:when|what (?:date|day|time|year|month)|which (?:date|day|year|month)|how long ago|"
    r"how long (?:has|have|had|did|before|after)|since when|what period|"
    r"(?:what|which) (?:week|weekend)|how (?:many|much) (?:days|weeks|months|years|time) "
    r"(?:ago|before|after|since|passed))\b|什么时候|何时|哪天|哪一天|哪年|哪一年|哪个月|哪一周|哪周|"
    r"几月|几号|多久|多长时间|多少年|多少天|几年前|几天前|几个月前", re.I)


def asks_when(query: str) -> bool:
    """True for "when" / "how long ago" questions, English or Chinese."""
    return WHEN_QUESTION.search(query) is not None


def describe(at: datetime, precision: str, now: datetime | None = None) -> str:
    """A short human phrase: "on 7 May 2023 (2 years ago)", "in May 2023", "in 2021"."""
    at = _utc(at)
    if precision == "year":
        text = f"in {at:%Y}"
    elif precision == "month":
        text = f"in {at:%B %Y}"
    elif precision == "week":
        text = f"in the week of {span(at, 'week')[0].day} {span(at, 'week')[0]:%B %Y}"
    else:
        text = f"on {at.day} {at:%B %Y}"
    return f"{text} ({ago(at, _utc(now or datetime.now(UTC)))})"


def ago(at: datetime, now: datetime) -> str:
    days = (now.date() - at.date()).days
    future, days = days < 0, abs(days)
    for size, unit in ((365, "year"), (30, "month"), (7, "week"), (1, "day")):
        if days >= size:
            n = days // size
            amount = f"{n} {unit}{'s' if n > 1 else ''}"
            return f"in {amount}" if future else f"{amount} ago"
    return "today"
