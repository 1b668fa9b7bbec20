"""Time rules written for this purpose (not taken from any eval set): months named without a
year, weekdays in either tense, before/after/since/until periods, bad input, EN and ZH."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from onebox.knowledge.memory import happened_time, time_bonus
from onebox.knowledge.timeparse import EARLIEST, LATEST, asks_when, find_time, future_tense

TURN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # a Monday in May


def _day(text: str, anchor: datetime = TURN) -> tuple[str, str, str]:
    mention = find_time(text, anchor)
    assert mention is not None, text
    return mention.at.date().isoformat(), mention.precision, mention.relation


@pytest.mark.parametrize(("text", "expected"), [
    ("We drove to the coast in March.", ("2023-03-01", "month", "in")),
    ("We drove to the coast in September.", ("2022-09-01", "month", "in")),  # past: last September
    ("We will drive to the coast in September.", ("2023-09-01", "month", "in")),  # future: this one
    ("I'm going camping in March", ("2024-03-01", "month", "in")),
    ("We moved in May", ("2023-05-01", "month", "in")),  # the anchor's own month
    ("She started the job last May", ("2022-05-01", "month", "in")),
    ("The lease ends next May", ("2024-05-01", "month", "in")),
    ("The lease ends next June", ("2023-06-01", "month", "in")),
    ("this December we host", ("2023-12-01", "month", "in")),
    ("the party on June 3rd was loud", ("2022-06-03", "day", "in")),
    ("my exam is on 14 June, I will pass", ("2023-06-14", "day", "in")),
    ("I saw Bo on Friday", ("2023-05-05", "day", "in")),
    ("I will see Bo on Friday", ("2023-05-12", "day", "in")),
    ("next Wednesday we fly", ("2023-05-10", "day", "in")),
    ("去年五月我去了北京", ("2022-05-01", "month", "in")),
    ("明年3月15日开学", ("2024-03-15", "day", "in")),
    ("我打算三月去日本", ("2024-03-01", "month", "in")),
    ("我三月去了日本", ("2023-03-01", "month", "in")),
    ("5月8号我们见了面", ("2023-05-08", "day", "in")),
])
def test_months_and_weekdays_without_a_year_follow_the_tense(text: str, expected: tuple[str, str, str]) -> None:
    assert _day(text) == expected


@pytest.mark.parametrize("text", [
    "I may go hiking soon",  # "may" the verb
    "May I ask you something?",
    "We met on Fridays for years",  # a habit, not a day
    "几月几号见？",  # a question word, not a month
])
def test_words_that_only_look_like_dates(text: str) -> None:
    assert find_time(text, TURN) is None


@pytest.mark.parametrize(("text", "relation", "start", "end"), [
    ("What did Ana do before May 2023?", "before", EARLIEST, datetime(2023, 5, 1, tzinfo=UTC)),
    ("What did Ana do after 2022?", "after", datetime(2023, 1, 1, tzinfo=UTC), LATEST),
    ("What has Ana done since last year?", "since", datetime(2022, 1, 1, tzinfo=UTC), LATEST),
    ("Which trips did Ana take until March 2023?", "until", EARLIEST,
     datetime(2023, 4, 1, tzinfo=UTC)),
    ("Ana在2023年5月之前做了什么", "before", EARLIEST, datetime(2023, 5, 1, tzinfo=UTC)),
    ("2022年以后她去过哪里", "after", datetime(2023, 1, 1, tzinfo=UTC), LATEST),
    ("自从去年她搬了几次家", "since", datetime(2022, 1, 1, tzinfo=UTC), LATEST),
])
def test_before_after_since_until_open_the_window(
    text: str, relation: str, start: datetime, end: datetime,
) -> None:
    mention = find_time(text, TURN)
    assert mention is not None and mention.relation == relation
    assert mention.window() == (start, end)


@pytest.mark.parametrize("text", [
    "the day before yesterday", "三年前他开始学钢琴", "我去年前往日本", "今天起床很早",
    "a photo from last week",
])
def test_phrases_that_contain_relation_words_are_still_plain_times(text: str) -> None:
    mention = find_time(text, TURN)
    assert mention is not None and mention.relation == "in"


@pytest.mark.parametrize("text", [
    "in 100000 years", "1000000000 days ago", "on 31 February",
    "", "   ", "\x00\x01 May", "2023-99-99", "13月45号",
])
def test_bad_input_is_no_time_and_never_raises(text: str) -> None:
    assert find_time(text, TURN) is None


def test_an_impossible_day_falls_back_to_its_month() -> None:
    assert _day("30 February 2023") == ("2023-02-01", "month", "in")


def test_naive_anchor_is_read_as_utc() -> None:
    mention = find_time("yesterday", datetime(2023, 5, 8, 1, 0))
    assert mention is not None and mention.at == datetime(2023, 5, 7, 1, 0, tzinfo=UTC)


def test_future_phrases() -> None:
    assert future_tense("We'll visit in July") and future_tense("我打算下个月去")
    assert not future_tense("We visited in July")
    assert _day("We are moving in two weeks") == ("2023-05-22", "week", "in")
    assert _day("我们三天后出发") == ("2023-05-11", "day", "in")


def test_new_when_questions() -> None:
    for q in ("How many weeks ago did Ana move?", "Which weekend did they go hiking?",
              "她哪个月搬的家？", "他几年前开始学钢琴？"):
        assert asks_when(q), q
    assert not asks_when("How many dogs does Ana have?")


def test_period_bonus_uses_the_open_window() -> None:
    row = {"happened_at": datetime(2023, 3, 4, tzinfo=UTC), "happened_precision": "day",
           "happened_text": None}
    before_may = find_time("What did Ana do before May 2023?", TURN)
    after_may = find_time("What did Ana do after May 2023?", TURN)
    assert time_bonus(row, before_may, False) > 0 and time_bonus(row, after_may, False) == 0


def test_a_memory_with_no_phrase_takes_the_session_date() -> None:
    said = happened_time("Ana: the hike was lovely", "1:56 pm on 8 May, 2023", None)
    assert said is not None and said.at == TURN and said.precision == "minute"
    dated = happened_time("Ana: the hike was lovely", "2023-05-08", None)
    assert dated is not None and dated.precision == "day" and dated.text == ""  # states no time
    stated = happened_time("Ana: we hiked there in March", "1:56 pm on 8 May, 2023", None)
    assert stated is not None and stated.at == datetime(2023, 3, 1, tzinfo=UTC)
