"""Train the answer cache's rewording model: a low-rank adapter over the bundled e5, read as
a cross-encoder (:mod:`onebox.llm.rewording`), written to src/onebox/llm/data/.

    .venv/bin/pip install torch==2.13.0          # CPU build; not a dependency of onebox
    .venv/bin/python scripts/train_rewording.py [--epochs 6] [--out PATH]

Training pairs: bench/data/cache_pairs_v3.jsonl without its held-out splits (heldout6,
heldout7, heldout8: never read here), both orders at random, label 1 for "hit" (the same
question in other words) and 0 for "miss"; and the near neighbours a cache full of those
questions meets: for each training question b, the stored training questions a (cosine >=
0.92, top 5) of another pair that the cache's rules leave to the model (the words they do
not share hold nothing protected), label 0. e5's weights stay frozen; each of the 72 weight
products of its 12 blocks gets a rank-8 adapter (``W + 2·B·A``, B starting at zero) and a
linear head reads the mean-pooled output. AdamW, one-cycle learning rate, batches of 32.
Takes about 15 minutes on two cores. Seeded, but threads make runs differ slightly.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from onebox.knowledge.equivalence import SentenceJudge, zh_words_to_judge
from onebox.knowledge.guard import different_question
from onebox.llm import minilm
from onebox.llm.e5_onnx import OnnxE5Encoder
from onebox.llm.e5_weights import E5Weights, load_e5_weights
from onebox.llm.rewording import ADAPTER, PRODUCTS, pair_ids

ROOT = Path(__file__).resolve().parent.parent
PAIRS = ROOT / "bench" / "data" / "cache_pairs_v3.jsonl"
HELD_OUT = {"heldout6", "heldout7", "heldout8"}
RANK, ALPHA = 8, 16.0


class Adapted(nn.Module):
    """``x @ W.T + b`` with W frozen, plus ``scale · x @ A.T @ B.T``."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("w", torch.from_numpy(weight.copy()))
        self.register_buffer("b", torch.from_numpy(bias.copy()))
        self.A = nn.Parameter(torch.randn(RANK, weight.shape[1]) / math.sqrt(weight.shape[1]))
        self.B = nn.Parameter(torch.zeros(weight.shape[0], RANK))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w, self.b) + F.linear(F.linear(x, self.A), self.B) * (
            ALPHA / RANK)


class CrossEncoder(nn.Module):
    """e5 (post-LN BERT blocks, mean pool) over one pair, as onebox.llm.rewording runs it."""

    def __init__(self, weights: E5Weights) -> None:
        super().__init__()
        self.weights, cfg, t = weights, weights.config, weights.tensors
        self.blocks = nn.ModuleList(nn.ModuleDict({
            p: Adapted(t[f"l{i}.{p}.w"].reshape(t[f"l{i}.{p}.b"].size, -1), t[f"l{i}.{p}.b"])
            for p in PRODUCTS}) for i in range(cfg.layers))
        self.norms = {k: torch.from_numpy(v.copy()) for k, v in t.items() if "ln." in k}
        self.pos = torch.from_numpy(t["emb.pos"].reshape(cfg.max_positions, -1).copy())
        self.type = torch.from_numpy(t["emb.type"].reshape(-1, cfg.hidden)[0].copy())
        self.head = nn.Linear(cfg.hidden, 1)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        cfg = self.weights.config
        return F.layer_norm(x, (cfg.hidden,), self.norms[f"{name}.w"], self.norms[f"{name}.b"],
                            cfg.eps)

    def forward(self, pairs: list[tuple[str, str]]) -> torch.Tensor:
        cfg = self.weights.config
        seqs = [pair_ids(self.weights.tokenizer, a, b) for a, b in pairs]
        n = max(map(len, seqs))
        ids = np.zeros((len(seqs), n), np.int64)
        mask = torch.zeros(len(seqs), n)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)], mask[row, : len(seq)] = seq, 1
        rows = self.weights.word_rows(ids).reshape(len(seqs), n, cfg.hidden)
        x = self._norm(torch.from_numpy(rows) + self.pos[:n] + self.type, "emb.ln")
        heads, width = cfg.heads, cfg.hidden // cfg.heads
        bias = (1 - mask)[:, None, None, :] * -1e9
        for i, block in enumerate(self.blocks):
            q, k, v = (block[p](x).view(len(seqs), n, heads, width).transpose(1, 2)
                       for p in "qkv")
            attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(width) + bias, -1)
            context = (attn @ v).transpose(1, 2).reshape(len(seqs), n, cfg.hidden)
            x = self._norm(x + block["ao"](context), f"l{i}.aln")
            x = self._norm(x + block["fo"](F.gelu(block["fi"](x))), f"l{i}.oln")
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True)
        return self.head(pooled).squeeze(-1)


def left_to_the_model(reason: str | None) -> bool:
    """A refusal the cache asks the rewording model about: terms differ, none protected."""
    return (reason is not None and reason.startswith("terms differ")
            and "' is " not in reason and "(after reading" not in reason)


def neighbours(pairs: list[dict], models: Path) -> list[tuple[str, str]]:
    """Training questions a cache would hold next to each other, of different pairs, that
    the rules leave to the model: (stored, asked) pairs to label 0."""
    encoder = OnnxE5Encoder.open(models)
    texts = sorted({p[s] for p in pairs for s in "ab"})
    vectors = encoder.encode(texts, True)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    at = {t: i for i, t in enumerate(texts)}
    same: dict[str, set[str]] = defaultdict(set)
    for p in pairs:
        if p["label"] == "hit":
            same[p["a"]].add(p["b"])
            same[p["b"]].add(p["a"])
    stored = sorted({p["a"] for p in pairs})
    matrix = vectors[[at[a] for a in stored]]
    words: dict[str, np.ndarray] = {}
    out = []
    for b in sorted({p["b"] for p in pairs}):
        sims = matrix @ vectors[at[b]]
        for j in np.argsort(-sims)[:5]:
            a = stored[j]
            if sims[j] < 0.92:
                break
            if a == b or b in same[a]:
                continue
            wanted = [w for w in zh_words_to_judge(a, b) if w not in words]
            if wanted:
                found = encoder.encode(wanted, True)
                words.update(zip(wanted, found / np.linalg.norm(found, axis=1, keepdims=True),
                                 strict=True))

            def judge(x: str, y: str) -> bool:
                return x in words and y in words and float(words[x] @ words[y]) >= 0.92
            reason = different_question(a, b, judge, SentenceJudge(minilm.similarity, 0.975))
            if left_to_the_model(reason):
                out.append((a, b))
    encoder.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ADAPTER)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    pairs = [json.loads(line) for line in PAIRS.read_text("utf-8").splitlines() if line.strip()]
    pairs = [p for p in pairs if p["split"] not in HELD_OUT]
    with tempfile.TemporaryDirectory(prefix="onebox-train-") as models:
        negatives = neighbours(pairs, Path(models))
    data = [(p["a"], p["b"], 1.0 if p["label"] == "hit" else 0.0) for p in pairs]
    data += [(a, b, 0.0) for a, b in negatives]
    print(f"{len(pairs)} labelled pairs, {len(negatives)} neighbours", file=sys.stderr)
    model = CrossEncoder(load_e5_weights())
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    batch = 32
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser, max_lr=args.lr, total_steps=args.epochs * (len(data) // batch + 1),
        pct_start=0.1)
    started = time.monotonic()
    for epoch in range(args.epochs):
        random.shuffle(data)
        data = [(b, a, y) if random.random() < 0.5 else (a, b, y) for a, b, y in data]
        total = 0.0
        for i in range(0, len(data), batch):
            chunk = data[i : i + batch]
            loss = F.binary_cross_entropy_with_logits(
                model([(a, b) for a, b, _ in chunk]), torch.tensor([y for *_, y in chunk]))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += loss.item() * len(chunk)
        print(f"epoch {epoch + 1}/{args.epochs}: loss {total / len(data):.4f} "
              f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    save(model, args.out)
    print(f"wrote {args.out}", file=sys.stderr)


def save(model: CrossEncoder, out: Path) -> None:
    arrays: dict[str, np.ndarray] = {"scale": np.float32(ALPHA / RANK)}
    for i, block in enumerate(model.blocks):
        for p in PRODUCTS:
            arrays[f"l{i}.{p}.A"] = block[p].A.detach().numpy().astype(np.float16)
            arrays[f"l{i}.{p}.B"] = block[p].B.detach().numpy().astype(np.float16)
    arrays["head.w"] = model.head.weight.detach().numpy().reshape(-1).astype(np.float32)
    arrays["head.b"] = model.head.bias.detach().numpy().reshape(-1).astype(np.float32)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main()
