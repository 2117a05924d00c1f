"""Intervals over items beside intervals over seeds: a finding's difference resampled over the fixed items it was
measured on (BLiMP's paradigms and the pairs within them, CoNLL-2003's dev sentences), the seeds held as they are.

A seed interval (analysis.verdicts) answers "would other pretraining seeds give the same difference?" on these
items; an item interval answers "would other items of the same kind give it?" on these seeds. One draw resamples
the items with replacement, the same draw for every seed and both sides (each seed's pairing kept), recomputes
every side's value per seed on the drawn items and takes the mean over seeds of A - B:

- BLiMP (a `zeroshot` side at level overall): the release's macro average over paradigms. A draw picks the
  paradigms and, where zeroshot.json keeps each pair's outcome (`pair_outcomes`), the pairs within each paradigm.
  The pair draw of a paradigm is shared by the slots that pick it twice in one draw (a vectorised nested
  bootstrap; it narrows the within-paradigm part a little). Reports written before pair outcomes were kept
  resample paradigms only, with their pairs as they are.
- CoNLL-2003 (a `finetune` side with an entity F1): micro F1 from each dev sentence's [tp, fp, fn] (items.json,
  after the epoch the side reads, else the last), 2 tp / (2 tp + fp + fn) over the drawn sentences.

The item test is calibrated as the seed test: its p-value is twice the share of draws on the wrong side of the
claim's threshold (with the add-one correction), so it is below alpha exactly when the percentile (1 - alpha)
interval lies in the claim's region.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analysis.verdicts import Claim, ClaimTest, claim_test
from common.atomic import read_artefact
from common.errors import ArmlmError
from finetune.metrics import ITEMS_FILE

ITEM_DRAWS = 10_000
# What an item bootstrap can resample, as a registration names the population its claim generalises over: CoNLL dev
# documents (each with all its sentences) or sentences one by one; BLiMP pairs within each paradigm (the fixed macro
# average) or whole paradigms (the phenomena).
ITEM_UNITS = ("documents", "sentences", "pairs", "paradigms")


@dataclass(frozen=True)
class BlimpItems:
    """One side's BLiMP outcomes in one seed: per paradigm, its accuracy and (where kept) each pair's outcome."""

    accuracy: dict[str, float]
    outcomes: dict[str, np.ndarray] | None


@dataclass(frozen=True)
class SentenceItems:
    counts: np.ndarray  # (sentences, 3): tp, fp, fn


@dataclass(frozen=True)
class ItemInterval:
    items: str  # what was resampled: "paradigms", "paradigms and pairs", "sentences"
    differences: np.ndarray  # one mean-over-seeds A - B per draw
    low: float
    high: float


def blimp_items(report: dict[str, Any], method: str) -> BlimpItems:
    rows = report["blimp"]["results"][method]
    accuracy = {r["name"]: float(r["accuracy"]) for r in rows if r["level"] == "paradigm"}
    kept = report["blimp"].get("pair_outcomes", {}).get(method)
    outcomes = None if kept is None else {uid: np.frombuffer(bits.encode(), dtype=np.uint8) == ord("1")
                                          for uid, bits in kept.items()}
    return BlimpItems(accuracy, outcomes)


def read_items(folder: Path, score: str, epoch: int | None) -> SentenceItems | None:
    """The per-sentence statistics that give `score` in one fine-tuning run folder, after `epoch` (1-based; None: the
    last), or None where the run kept none (it predates items.json, or no metric gives that score per item)."""
    path = folder / ITEMS_FILE
    if not path.is_file():
        return None
    record = read_artefact(path)
    names = [name for name, m in record["metrics"].items() if m["score"] == score]
    if not names:
        return None
    splits = record["splits"]
    split = "validation" if "validation" in splits else next(iter(splits))
    evaluations = splits[split][names[0]]
    if epoch is not None and not 1 <= epoch <= len(evaluations):
        raise ArmlmError(f"{path} has {len(evaluations)} evaluations; a side reads epoch {epoch}")
    return SentenceItems(np.asarray(evaluations[-1 if epoch is None else epoch - 1], dtype=np.int64))


def _blimp_draws(sides: list[dict[int, BlimpItems]], seeds: list[int], draws: int,
                 rng: np.random.Generator) -> tuple[list[np.ndarray], str]:
    """Per side, (draws, seeds) overall accuracies on resampled paradigms (and pairs, where every table has them)."""
    tables = [side[s] for side in sides for s in seeds]
    uids = sorted(set.intersection(*(set(t.accuracy) for t in tables)))
    if len(uids) != len(tables[0].accuracy) or any(len(t.accuracy) != len(uids) for t in tables):
        raise ArmlmError("the sides' BLiMP reports hold different paradigms; score both on the same ones")
    with_pairs = all(t.outcomes is not None for t in tables)
    chosen = rng.integers(0, len(uids), size=(draws, len(uids)))
    per_paradigm = []  # per table: (paradigms, draws) accuracy of each paradigm in each draw
    pair_draws = {}
    if with_pairs:
        for uid in uids:
            n = len(tables[0].outcomes[uid])
            if any(len(t.outcomes[uid]) != n for t in tables):
                raise ArmlmError(f"paradigm {uid} has different pairs in the sides' reports")
            pair_draws[uid] = rng.integers(0, n, size=(draws, n))
    for t in tables:
        if with_pairs:
            per_paradigm.append(np.stack([t.outcomes[u][pair_draws[u]].mean(axis=1) for u in uids]))
        else:
            per_paradigm.append(np.repeat(np.array([t.accuracy[u] for u in uids])[:, None], draws, axis=1))
    columns = np.arange(draws)[:, None]
    overall = [p[chosen, columns].mean(axis=1) for p in per_paradigm]  # (draws,) per table
    k = len(seeds)
    per_side = [np.stack(overall[i * k:(i + 1) * k], axis=1) for i in range(len(sides))]
    return per_side, "paradigms and pairs" if with_pairs else "paradigms"


def _sentence_draws(sides: list[dict[int, SentenceItems]], seeds: list[int], draws: int,
                    rng: np.random.Generator) -> tuple[list[np.ndarray], str]:
    n = len(sides[0][seeds[0]].counts)
    if any(len(side[s].counts) != n for side in sides for s in seeds):
        raise ArmlmError("the sides' runs were scored on different dev sentences; fine-tune both on the same split")
    chosen = rng.integers(0, n, size=(draws, n))
    tables = np.concatenate([side[s].counts for side in sides for s in seeds], axis=1)  # (n, 3 x tables)
    totals = np.empty((draws, tables.shape[1]), dtype=np.int64)
    for start in range(0, draws, 1000):  # each draw's totals: how often it drew each sentence, times its counts
        block = chosen[start:start + 1000]
        offsets = block + n * np.arange(len(block))[:, None]
        weights = np.bincount(offsets.ravel(), minlength=len(block) * n).reshape(len(block), n)
        totals[start:start + len(block)] = weights @ tables
    tp, fp, fn = totals[:, 0::3], totals[:, 1::3], totals[:, 2::3]
    denominator = 2 * tp + fp + fn
    f1 = np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)  # (draws, tables)
    k = len(seeds)
    per_side = [f1[:, i * k:(i + 1) * k] for i in range(len(sides))]
    return per_side, "sentences"


def item_interval(items: list[dict[int, BlimpItems | SentenceItems] | None], seeds: list[int], level: float = 0.95,
                  draws: int = ITEM_DRAWS, seed: int = 0) -> ItemInterval | None:
    """The mean over `seeds` of A - B under `draws` resamples of the items both sides were measured on (`items`:
    per side, seed -> its items; analysis.findings.side_items), with its percentile interval at `level`; None where
    a side has no items (or they differ in kind)."""
    if not seeds or any(i is None for i in items):
        return None
    kinds = {type(next(iter(i.values()))) for i in items}
    if len(kinds) != 1:
        return None
    rng = np.random.default_rng(seed)
    resample = _blimp_draws if kinds == {BlimpItems} else _sentence_draws
    (side_a, side_b), what = resample(items, seeds, draws, rng)
    differences = (side_a - side_b).mean(axis=1)
    low, high = np.quantile(differences, [(1 - level) / 2, (1 + level) / 2])
    return ItemInterval(what, differences, float(low), float(high))


def item_test(interval: ItemInterval, claim: Claim) -> ClaimTest:
    """Both one-sided bootstrap tests of `claim` (analysis.verdicts.claim_test's calibration): each tail is the share
    of draws on the wrong side of the threshold, with the add-one correction."""
    d, draws = claim.sign * interval.differences, len(interval.differences)
    return claim_test(claim, lambda t: (int((d <= t).sum()) + 1) / (draws + 1),
                      lambda t: (int((d >= t).sum()) + 1) / (draws + 1), draws)


def item_columns(items: list[dict[int, BlimpItems | SentenceItems] | None], claim: Claim, seeds: list[int],
                 alpha: float, draws: int = ITEM_DRAWS, seed: int = 0) -> tuple[dict[str, Any], ClaimTest | None]:
    """A findings row's item columns (what was resampled, the (1 - alpha) interval) and its item test (None
    where a side has no items)."""
    interval = item_interval(items, seeds, 1 - alpha, int(draws), int(seed))
    if interval is None:
        return {"items": "", "item_low": float("nan"), "item_high": float("nan")}, None
    return {"items": interval.items, "item_low": interval.low, "item_high": interval.high}, item_test(interval, claim)
