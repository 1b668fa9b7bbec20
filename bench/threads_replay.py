"""LoCoMo conversations as threads: turns, dates, questions and the whole-history baseline.

Pure helpers for bench/threads.py (no database): each session's turns become messages of
one thread with the session's date; the baseline is what a client sending the whole
history would send each turn.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from onebox.llm.embedding import estimate_tokens

DIA_ID = re.compile(r"D\d+:\d+")
QA_CATEGORIES = (1, 2, 3, 4)  # 5 (adversarial) has no evidence to reach


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    at: datetime | None

    @property
    def message(self) -> str:
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    text: str
    evidence: frozenset[str]
    category: int


def load(root: Path) -> list[dict[str, Any]]:
    with (root / "locomo" / "locomo_dev.json").open(encoding="utf-8") as fh:
        samples: list[dict[str, Any]] = json.load(fh)
    return samples


def parse_date(text: str) -> datetime | None:
    """LoCoMo's session dates read like '1:56 pm on 8 May, 2023'."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def turns(sample: dict[str, Any]) -> list[Turn]:
    conv = sample["conversation"]
    out: list[Turn] = []
    n = 1
    while f"session_{n}" in conv:
        at = parse_date(conv.get(f"session_{n}_date_time", ""))
        for t in conv[f"session_{n}"]:
            text = t.get("text", "")
            if t.get("blip_caption"):
                text += f" [shares an image: {t['blip_caption']}]"
            out.append(Turn(t["dia_id"], t["speaker"], text, at))
        n += 1
    return out


def session_summaries(sample: dict[str, Any]) -> dict[int, str]:
    """LoCoMo's summary of each session, by session number."""
    found = sample.get("session_summary") or {}
    return {int(k.split("_")[1]): str(v) for k, v in found.items() if k.endswith("_summary")}


def observations(sample: dict[str, Any]) -> dict[str, list[str]]:
    """LoCoMo's facts observed in each turn ({dia_id: [fact, ...]}): what a fact-extracting
    model writes after the turn (each names who and what, e.g. 'Caroline attended an LGBTQ
    support group recently'), used as the scripted model's extraction."""
    out: dict[str, list[str]] = {}
    for by_speaker in (sample.get("observation") or {}).values():
        for facts in by_speaker.values():
            for text, where in facts:
                for dia_id in DIA_ID.findall(str(where))[:1]:
                    out.setdefault(dia_id, []).append(str(text))
    return out


def questions(sample: dict[str, Any]) -> list[Question]:
    out = []
    for qa in sample["qa"]:
        evidence = frozenset(DIA_ID.findall(" ".join(map(str, qa.get("evidence", [])))))
        if qa["category"] in QA_CATEGORIES and evidence:
            out.append(Question(str(qa["question"]), evidence, int(qa["category"])))
    return out


def history_tokens(replayed: list[Turn], message: str) -> int:
    """Prompt tokens of the baseline: every earlier turn verbatim plus the new message."""
    return sum(estimate_tokens(t.message) for t in replayed) + estimate_tokens(message)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0
