"""Readers for the evaluation sets (BEIR layout, LoCoMo JSON). Data is read in place, never copied."""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any


def eval_root(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = os.environ.get("ONEBOX_EVAL_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "eval-data"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with path.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            qrels[row["query-id"]][row["corpus-id"]] = int(row["score"])
    return dict(qrels)


def scifact_doc_text(doc: dict[str, Any]) -> str:
    return f"{doc['title']}\n\n{doc['text']}".strip()


def cmrc_sentence_text(doc: dict[str, Any]) -> str:
    """Each sentence carries its article title (a heading), as a chunk would."""
    return doc["text"].strip()


Beir = tuple[list[dict[str, Any]], dict[str, str], dict[str, dict[str, int]]]


def load_scifact(folder: Path) -> Beir:
    """SciFact (a BEIR folder) with its train judgements, the split the bench has always used."""
    if (folder / "scifact").is_dir():  # the eval-data root, as callers passed before --beir
        folder = folder / "scifact"
    corpus, queries, qrels, _ = load_beir(folder, "train")
    return corpus, queries, qrels


def load_beir(folder: Path, split: str = "") -> tuple[list[dict[str, Any]], dict[str, str],
                                                      dict[str, dict[str, int]], str]:
    """Any BEIR-layout folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (default: test,
    else the first qrels file by name)."""
    qrels_dir = folder / "qrels"
    if not split:
        names = sorted(p.stem for p in qrels_dir.glob("*.tsv"))
        if not names:
            raise SystemExit(f"{folder}: no qrels/*.tsv; a BEIR folder needs qrels/<split>.tsv")
        split = "test" if "test" in names else names[0]
    for name in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (folder / name).exists():
            raise SystemExit(f"{folder}: missing {name} (BEIR layout: corpus.jsonl, queries.jsonl, "
                             "qrels/<split>.tsv)")
    corpus = read_jsonl(folder / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in read_jsonl(folder / "queries.jsonl")}
    return corpus, queries, read_qrels(qrels_dir / f"{split}.tsv"), split


def order_relevant_first(corpus: list[dict[str, Any]], qrels: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    relevant = {d for rels in qrels.values() for d in rels}
    return [d for d in corpus if d["_id"] in relevant] + [d for d in corpus if d["_id"] not in relevant]


def load_cmrc_sentences(base: Path) -> Beir:
    """A CMRC-style folder: corpus_sentences.jsonl (title, text), queries.jsonl,
    qrels/sentences_trial.tsv."""
    corpus = read_jsonl(base / "corpus_sentences.jsonl")
    queries = {q["_id"]: q["text"] for q in read_jsonl(base / "queries.jsonl")}
    qrels = read_qrels(base / "qrels" / "sentences_trial.tsv")
    return corpus, queries, qrels


def load_locomo(path: Path) -> list[dict[str, Any]]:
    """A LoCoMo-style JSON file: a list of {conversation: {session_<n>, ...}, qa: [...]}."""
    if path.is_dir():  # the eval-data root, as callers passed before --locomo
        path = path / "locomo" / "locomo_dev.json"
    with path.open(encoding="utf-8") as fh:
        data: list[dict[str, Any]] = json.load(fh)
    return data


def locomo_turns(sample: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(dia_id, session date text, content) for every turn, image captions included."""
    conv = sample["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        date = conv.get(f"session_{n}_date_time", "")
        for turn in conv[f"session_{n}"]:
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text += f" [shares an image: {turn['blip_caption']}]"
            out.append((turn["dia_id"], date, f"{turn['speaker']}: {text}"))
        n += 1
    return out
