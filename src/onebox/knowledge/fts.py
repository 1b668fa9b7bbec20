"""Full-text query building shared by knowledge search and memory recall.

PostgreSQL ranks with ``ts_rank``, which has no inverse document frequency;
onebox keeps per-space document frequencies (``onebox.fts_terms``) and scores
BM25 in SQL. A query becomes: its lexemes with their idf (all of them are
scored) and a ``tsquery`` OR-ing the lexemes rare enough to select candidates
(a lexeme found in more than ``max_df_ratio`` of the rows, and in more than
1,000, selects nearly everything and adds little to the score, so it does not
widen the scan; when every lexeme is that common there are no full-text
candidates). At most ``CANDIDATE_CAP`` matching rows are scored. The
rarest lexemes are taken first until their document frequencies add up to
``candidate_budget`` rows, which bounds the work of one query on a large corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onebox.knowledge.queries import sql
from onebox.knowledge.text import segment_for_fts
from onebox.store.db import Database

BM25_K1 = 1.2
BM25_B = 0.75
CANDIDATE_CAP = 2_000  # rows scored per query at most, whatever the lexemes


@dataclass(frozen=True)
class FtsQuery:
    lexemes: list[str]
    idfs: list[float]
    tsquery: str
    avgdl: float

    def params(self) -> dict[str, object]:
        return {
            "lexemes": self.lexemes, "idfs": self.idfs, "tsquery": self.tsquery,
            "avgdl": self.avgdl, "k1": BM25_K1, "b": BM25_B, "cap": CANDIDATE_CAP,
        }


def quote_lexeme(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


async def build_fts_query(
    db: Database, text: str, spaces: list[str], max_df_ratio: float = 0.25,
    candidate_budget: int = 2_000,
) -> FtsQuery | None:
    """The BM25 query for ``text`` over ``spaces``; None when no lexeme occurs there."""
    rows = await db.fetch(sql("search.fts_terms"), {"text": segment_for_fts(text), "spaces": spaces})
    present = [r for r in rows if r["df"] > 0]
    if not present:
        return None
    selective = _candidate_lexemes(present, max_df_ratio, candidate_budget)
    if not selective:  # every lexeme is in most rows: lexical matching carries no signal
        return None
    return FtsQuery(
        lexemes=[r["lexeme"] for r in present],
        idfs=[float(r["idf"]) for r in present],
        tsquery=" | ".join(quote_lexeme(r["lexeme"]) for r in selective),
        avgdl=float(present[0]["avgdl"]),
    )


def _candidate_lexemes(
    present: list[dict[str, Any]], max_df_ratio: float, candidate_budget: int
) -> list[dict[str, Any]]:
    """The rarest lexemes, each selective enough, until their df adds up to the budget."""
    rare_first = sorted(present, key=lambda r: r["df"])
    chosen: list[dict[str, Any]] = []
    budget_used = 0
    for r in rare_first:
        if r["df"] > max(max_df_ratio * r["n"], 1000):
            break  # sorted by df: every later lexeme is as common
        if chosen and budget_used + r["df"] > candidate_budget:
            break
        chosen.append(r)
        budget_used += r["df"]
    return chosen
