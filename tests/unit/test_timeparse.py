"""Time expressions: absolute dates and relative phrases (EN, ZH) resolved against a turn's date."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from onebox.errors import ValidationError
from onebox.knowledge.memory import happened_time, time_bonus
from onebox.knowledge.timeparse import asks_when, describe, find_time, parse_when

TURN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(("text", "day", "precision"), [
    ("I went to the support group yesterday.", "2023-05-07", "day"),
    ("We met the day before yesterday", "2023-05-06", "day"),
    ("I painted that last Friday!", "2023-05-05", "day"),
    ("Last week I ran a charity race.", "2023-05-01", "week"),
    ("We moved here two years ago.", "2021-05-08", "year"),
    ("I adopted him 3 months ago", "2023-02-08", "month"),
    ("a few weeks ago I quit", "2023-04-17", "week"),
    ("we're going camping next month", "2023-06-08", "month"),
    ("Tonight I'm baking", "2023-05-08", "day"),
    ("我昨天去了游泳", "2023-05-07", "day"),
    ("她前天搬家了", "2023-05-06", "day"),
    ("我们上周五见过面", "2023-05-05", "day"),
    ("上个月我换了工作", "2023-04-08", "month"),
    ("去年我去了日本", "2022-05-08", "year"),
    ("三年前他开始学钢琴", "2020-05-08", "year"),
    ("两个星期前我们吵架了", "2023-04-24", "week"),
    ("十二天前", "2023-04-26", "day"),
])
def test_relative_phrases_resolve_against_the_turn(text: str, day: str, precision: str) -> None:
    mention = find_time(text, TURN)
    assert mention is not None
    assert (mention.at.date().isoformat(), mention.precision) == (day, precision)


@pytest.mark.parametrize(("text", "at", "precision"), [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC), "minute"),
    ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37, tzinfo=UTC), "minute"),
    ("the concert on May 20, 2023 was loud", datetime(2023, 5, 20, tzinfo=UTC), "day"),
    ("my birthday, 3rd of March 2021", datetime(2021, 3, 3, tzinfo=UTC), "day"),
    ("back in July 2022 I started", datetime(2022, 7, 1, tzinfo=UTC), "month"),
    ("I graduated in 2019.", datetime(2019, 1, 1, tzinfo=UTC), "year"),
    ("2023-05-08 deploy", datetime(2023, 5, 8, tzinfo=UTC), "day"),
    ("我在2022年7月15日结婚", datetime(2022, 7, 15, tzinfo=UTC), "day"),
    ("2021年3月开始", datetime(2021, 3, 1, tzinfo=UTC), "month"),
    ("2019年毕业", datetime(2019, 1, 1, tzinfo=UTC), "year"),
])
def test_absolute_dates_win_over_the_anchor(text: str, at: datetime, precision: str) -> None:
    mention = find_time(text, TURN)
    assert mention is not None and (mention.at, mention.precision) == (at, precision)


def test_text_without_time_has_none() -> None:
    assert find_time("My dog is called Oscar and loves the beach.", TURN) is None
    assert find_time("我的狗叫奥斯卡", TURN) is None
    assert find_time("I have 2023 stamps... no, 12", TURN) is None


def test_parse_when_accepts_dates_and_names_the_field_when_wrong() -> None:
    assert parse_when("2023-05-08").at == datetime(2023, 5, 8, tzinfo=UTC)
    assert parse_when("2023-05-08T13:56:00Z").precision == "minute"
    assert parse_when("8 May 2023").at == datetime(2023, 5, 8, tzinfo=UTC)
    assert parse_when("2023年5月8日").precision == "day"
    for bad in ("soon-ish", "2023-13-45", "yesterday or so", ""):
        with pytest.raises(ValidationError) as err:
            parse_when(bad)
        assert err.value.field == "happened_at" and "ISO 8601" in str(err.value)


def test_happened_time_resolves_text_against_the_given_date_then_metadata() -> None:
    said = happened_time("I went hiking yesterday", "2023-05-08", None)
    assert said is not None and said.at.date().isoformat() == "2023-05-07"
    assert said.text == "yesterday"
    session = happened_time("I love hiking", None, {"date": "1:56 pm on 8 May, 2023"})
    assert session is not None and session.at == TURN and session.precision == "minute"
    assert happened_time("I love hiking", None, {"date": "some day"}) is None
    assert happened_time("I love hiking", None, None) is None


def test_when_questions_and_bonuses() -> None:
    assert asks_when("When did Caroline go to the LGBTQ support group?")
    assert asks_when("How long ago was Melanie's first race?")
    assert asks_when("她什么时候去的日本？") and asks_when("他多久以前开始学钢琴")
    assert not asks_when("What is Caroline's identity?")
    row = {"happened_at": datetime(2023, 5, 7, tzinfo=UTC), "happened_precision": "day",
           "happened_text": "yesterday"}
    may = find_time("What did I do in May 2023?", TURN)
    june = find_time("What did I do in June 2023?", TURN)
    assert time_bonus(row, may, False) > 0 and time_bonus(row, june, False) == 0
    assert time_bonus(row, None, True) > 0
    assert time_bonus({**row, "happened_text": None}, None, True) == 0


def test_describe_says_when_and_how_long_ago() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert describe(datetime(2023, 5, 7, tzinfo=UTC), "day", now) == "on 7 May 2023 (3 years ago)"
    assert describe(datetime(2026, 11, 3, tzinfo=UTC), "week", now) == \
        "in the week of 2 November 2026 (4 weeks ago)"
    assert describe(datetime(2026, 9, 1, tzinfo=UTC), "month", now) == "in September 2026 (3 months ago)"
    assert describe(datetime(2021, 1, 1, tzinfo=UTC), "year", now).startswith("in 2021 (")
