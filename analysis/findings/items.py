"""Intervals over items, and over seeds and items together: a finding's difference resampled over the fixed items it
was measured on (CoNLL-2003's dev documents or sentences, BLiMP's pairs within paradigms or whole paradigms), and the
crossed interval that covers both sources a claim generalises over.

One item draw gives every dev unit a weight (how often the draw picked it), the same draw for every seed and both
sides, so each seed's pairing is kept; every run's score is recomputed from its items under those weights:

- CoNLL-2003 (a `finetune` side with an entity F1): micro F1, 2 tp / (2 tp + fp + fn), from each dev sentence's
  [tp, fp, fn] (items.json, after the epoch the side reads). `documents` draws whole documents (each brings all its
  sentences: sentences of one news story share topics and names, so they are not independent draws); `sentences`
  draws them one by one.
- BLiMP (a `zeroshot` side at level overall), the release's macro average over paradigms: `pairs` draws pairs
  within each paradigm (the population is the fixed macro average, so paradigms are strata, not draws); `paradigms`
  draws whole paradigms with their accuracies as they are (the population is the phenomena).

Three intervals come of the draws, all of the mean over seeds of A - B:
- item-only (seeds held): its percentile interval, a diagnostic;
- seed-only: the paired t interval (analysis.findings.verdicts), a diagnostic;
- crossed: each draw also resamples the seeds, independently of the items, with their spread around the draw's mean
  scaled by sqrt(n / (n - 1)) (the bootstrap's small-sample shrinkage undone). The crossed draws count the seed x
  item interaction about three times, the two components once each, so the standard error is the two components
  less the draws' excess over them (Owen's pigeonhole correction). The interval is the observed mean +- t * that
  standard error, on Welch-Satterthwaite degrees of freedom where the items hold most of the variance and on the
  seeds' n - 1 where the seeds do; its test is calibrated as the seed test's (its p is below alpha exactly when the
  interval lies in the claim's region). The verdict reads it (analysis.reports.findings_report).

A side that is a difference of two readings (`relative_to`, an interaction) gives its items as signed terms.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import get_class
from omegaconf import OmegaConf
from scipy import stats

from armlm.analysis.findings.verdicts import Claim, ClaimTest, claim_test, t_tails
from armlm.common.atomic import read_artefact
from armlm.common.errors import ArmlmError
from armlm.common.migrations import namespaced
from armlm.finetune.artefacts import ITEMS_FILE

ITEM_DRAWS = 10_000
# What an item bootstrap can resample, as a registration names the population its claim generalises over: CoNLL dev
# documents (each with all its sentences) or sentences one by one; BLiMP pairs within each paradigm (the fixed macro
# average) or whole paradigms (the phenomena).
ITEM_UNITS = ("documents", "sentences", "pairs", "paradigms")
_BLOCK = 500  # draws weighed at once: (block, units) integer weights


@dataclass(frozen=True)
class BlimpItems:
    """One side's BLiMP outcomes in one seed: per paradigm, its accuracy and (where kept) each pair's outcome."""

    accuracy: dict[str, float]
    outcomes: dict[str, np.ndarray] | None


@dataclass(frozen=True)
class SentenceItems:
    counts: np.ndarray  # (sentences, 3): tp, fp, fn
    documents: np.ndarray | None = None  # (sentences,): the document each was drawn in, where known


Items = BlimpItems | SentenceItems
SideItems = list[tuple[float, dict[int, Items]]]  # a side's value is the signed sum of these readings' scores


def blimp_items(report: dict[str, Any], method: str) -> BlimpItems:
    rows = report["blimp"]["results"][method]
    accuracy = {r["name"]: float(r["accuracy"]) for r in rows if r["level"] == "paradigm"}
    kept = report["blimp"].get("pair_outcomes", {}).get(method)
    outcomes = None if kept is None else {uid: np.frombuffer(bits.encode(), dtype=np.uint8) == ord("1")
                                          for uid, bits in kept.items()}
    return BlimpItems(accuracy, outcomes)


def read_items(folder: Path, score: str, epoch: int | None) -> SentenceItems | None:
    """The per-sentence statistics that give `score` in one fine-tuning run folder, after `epoch` (1-based; None: the
    last), with each sentence's document where items.json kept them; None where the run kept none (it predates
    items.json, or no metric gives that score per item)."""
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
    counts = np.asarray(evaluations[-1 if epoch is None else epoch - 1], dtype=np.int64)
    documents = record.get("clusters", {}).get(split) or clusters_from_source(folder, split, len(counts))
    return SentenceItems(counts, None if documents is None else np.asarray(documents, dtype=np.int64))


def clusters_from_source(folder: Path, split: str, items: int) -> list[int] | None:
    """The cluster of each of the first `items` examples of a run's split, asked of its task's data module
    (`clusters_in`) from the source its Hydra config names: for items.json written before they were kept there (4
    December 2026). None where the run kept no config, or its task has no clusters, or the source is unreadable."""
    config = folder / ".hydra" / "config.yaml"
    if not config.is_file():
        return None
    data = OmegaConf.load(config).task.data
    clusters = _source_clusters(str(data._target_), str(data.source), split)
    return None if clusters is None or len(clusters) < items else list(clusters[:items])


@functools.lru_cache(maxsize=None)
def _source_clusters(target: str, source: str, split: str) -> tuple[int, ...] | None:
    """A task source's clusters, read once per process: every run of a study names the same dev split, and a family's
    rows read each run's items several times."""
    try:
        clusters = get_class(namespaced(target)).clusters_in(source, split)  # records name pre-namespace paths
    except (ArmlmError, OSError, AttributeError, ImportError):
        return None
    return None if clusters is None else tuple(clusters)


class _Design:
    """How one kind of item is resampled: the weight each unit gets in a draw, each reading's (units, k) table of
    what it sums, and the score of a weighted sum."""

    units: str  # what is resampled, in words
    resampled: int  # independent draws per resample (the item component's degrees of freedom + 1)
    size: int  # columns of a weight matrix

    def weights(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        raise NotImplementedError

    def table(self, items: Items) -> np.ndarray:
        raise NotImplementedError

    def score(self, totals: np.ndarray) -> np.ndarray:
        return totals[..., 0]


def _counts(rng: np.random.Generator, draws: int, n: int) -> np.ndarray:
    """(draws, n): how often each of n units is picked when n are drawn with replacement."""
    picked = rng.integers(0, n, size=(draws, n)) + n * np.arange(draws)[:, None]
    return np.bincount(picked.ravel(), minlength=draws * n).reshape(draws, n)


class _Sentences(_Design):
    def __init__(self, first: SentenceItems, by_document: bool) -> None:
        self.size = len(first.counts)
        self.documents = None
        if by_document:
            _, self.documents = np.unique(first.documents, return_inverse=True)
        self.resampled = self.size if self.documents is None else int(self.documents.max()) + 1
        self.units = "documents" if by_document else "sentences"

    def weights(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        picked = _counts(rng, draws, self.resampled)
        return picked if self.documents is None else picked[:, self.documents]

    def table(self, items: Items) -> np.ndarray:
        if not isinstance(items, SentenceItems) or len(items.counts) != self.size:
            raise ArmlmError("the sides' runs were scored on different dev sentences; fine-tune both on the same split")
        if self.documents is not None and items.documents is not None and not np.array_equal(
                np.unique(items.documents, return_inverse=True)[1], self.documents):
            raise ArmlmError("the sides' runs kept different dev documents; fine-tune both on the same split")
        return items.counts.astype(float)

    def score(self, totals: np.ndarray) -> np.ndarray:
        tp, fp, fn = totals[..., 0], totals[..., 1], totals[..., 2]
        denominator = 2 * tp + fp + fn
        return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


class _Paradigms(_Design):
    """The macro average over paradigms, as a weighted sum: each unit's column is its value / (pairs x paradigms)."""

    def __init__(self, first: BlimpItems, by_pair: bool) -> None:
        self.uids = sorted(first.accuracy)
        self.by_pair = by_pair
        self.sizes = [len(first.outcomes[u]) for u in self.uids] if by_pair else [1] * len(self.uids)
        self.size = sum(self.sizes)
        self.resampled = self.size - (len(self.uids) - 1 if by_pair else 0)  # strata cost one df each, less one
        self.units = "pairs within paradigms" if by_pair else "paradigms"

    def weights(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        if not self.by_pair:
            return _counts(rng, draws, self.size)
        return np.concatenate([_counts(rng, draws, n) for n in self.sizes], axis=1)

    def table(self, items: Items) -> np.ndarray:
        if not isinstance(items, BlimpItems) or sorted(items.accuracy) != self.uids:
            raise ArmlmError("the sides' BLiMP reports hold different paradigms; score both on the same ones")
        if not self.by_pair:
            return np.array([[items.accuracy[u] / len(self.uids)] for u in self.uids])
        if items.outcomes is None or [len(items.outcomes.get(u, ())) for u in self.uids] != self.sizes:
            raise ArmlmError("the sides' BLiMP reports kept different pairs; score both on the same pairs")
        return np.concatenate([items.outcomes[u] / (n * len(self.uids)) for u, n in zip(self.uids, self.sizes)])[:, None]


def _design(first: Items, unit: str | None, every: list[Items]) -> _Design:
    """The resampling a row's registered unit asks for (None: the finest the items allow of its claim's default)."""
    if isinstance(first, SentenceItems):
        known = all(isinstance(i, SentenceItems) and i.documents is not None for i in every)
        if unit in (None, "documents") and known:
            return _Sentences(first, by_document=True)
        if unit == "documents":
            raise ArmlmError("the row registered dev documents, but its runs kept no documents (items.json before "
                             "4 December 2026): fine-tune again, or register items: sentences")
        if unit not in (None, "sentences"):
            raise ArmlmError(f"items={unit!r} for a fine-tuned side; choose documents or sentences")
        return _Sentences(first, by_document=False)
    kept = all(isinstance(i, BlimpItems) and i.outcomes is not None for i in every)
    if unit == "pairs" and not kept:
        raise ArmlmError("the row registered BLiMP pairs, but its zero-shot reports kept no pair outcomes; score again")
    if unit not in (None, "pairs", "paradigms"):
        raise ArmlmError(f"items={unit!r} for a BLiMP side; choose pairs or paradigms")
    return _Paradigms(first, by_pair=unit == "pairs" or (unit is None and kept))


@dataclass(frozen=True)
class ItemInterval:
    """A row's difference on every item per seed, under item draws (seeds held) and crossed draws."""

    items: str  # what was resampled
    observed: np.ndarray  # (seeds,): A - B on every item
    item_draws: np.ndarray  # (draws,): the mean over seeds of A - B, items resampled
    crossed_draws: np.ndarray  # (draws,): seeds and items resampled; empty with fewer than two seeds
    resampled: int  # independent item units per draw
    level: float

    @property
    def mean(self) -> float:
        return float(self.observed.mean())

    @property
    def item_low(self) -> float:
        return float(np.quantile(self.item_draws, (1 - self.level) / 2))

    @property
    def item_high(self) -> float:
        return float(np.quantile(self.item_draws, (1 + self.level) / 2))

    @property
    def seed_variance(self) -> float:
        """The variance of the mean from seeds: the paired t-test's squared standard error (NaN below two seeds)."""
        n = len(self.observed)
        return float(self.observed.var(ddof=1) / n) if n > 1 else math.nan

    @property
    def item_variance(self) -> float:
        return float(self.item_draws.var(ddof=1))

    @property
    def interaction(self) -> float:
        """The seed x item interaction's share of the mean's variance, as the crossed draws count it in excess: the
        seed-only variance holds it once, the item-only once, and the crossed draws about three times (a resampled
        item set's seed spread carries it twice), so the excess over the two components is one more copy."""
        if len(self.crossed_draws) < 2:
            return math.nan
        return max(0.0, float(self.crossed_draws.var(ddof=1)) - self.seed_variance - self.item_variance)

    @property
    def se(self) -> float:
        """The crossed standard error of the mean difference: the two components less the interaction counted twice
        between them (Owen's pigeonhole correction), never below either component alone (NaN below two seeds)."""
        if len(self.crossed_draws) < 2:
            return math.nan
        v_seed, v_item = self.seed_variance, self.item_variance
        return math.sqrt(max(v_seed + v_item - self.interaction, v_seed, v_item))

    @property
    def df(self) -> float:
        """Welch-Satterthwaite degrees of freedom of the two components where the items hold most of the variance;
        the seeds' n - 1 where the seeds do (a seed variance on few degrees of freedom, small by chance, would
        otherwise raise the df and narrow the interval: with 3 seeds the interval covered 92-94 %)."""
        seeds, v_seed, v_item = len(self.observed), self.seed_variance, self.item_variance
        if not seeds > 1:
            return math.nan
        denominator = v_seed ** 2 / (seeds - 1) + v_item ** 2 / max(1, self.resampled - 1)
        if denominator == 0 or v_seed >= v_item:
            return float(seeds - 1)
        return (v_seed + v_item) ** 2 / denominator

    @property
    def half_width(self) -> float:
        return float(stats.t.ppf(0.5 + self.level / 2, self.df)) * self.se if self.df == self.df else math.nan

    @property
    def crossed_low(self) -> float:
        return self.mean - self.half_width

    @property
    def crossed_high(self) -> float:
        return self.mean + self.half_width


def item_interval(sides: list[SideItems | None], seeds: list[int], level: float = 0.95, draws: int = ITEM_DRAWS,
                  seed: int = 0, unit: str | None = None) -> ItemInterval | None:
    """A - B (`sides`: per side, its signed readings, seed -> items; analysis.findings.measures.side_items) on every item per
    seed, under `draws` item draws of `unit` (ITEM_UNITS; None: the finest the items allow) and as many crossed
    draws; None where a side has no items or the sides' items differ in kind."""
    if not seeds or any(not side for side in sides):
        return None
    readings = [(sign if k == 0 else -sign, by_seed) for k, side in enumerate(sides) for sign, by_seed in side]
    every = [by_seed[s] for _, by_seed in readings for s in seeds]
    if len({type(i) for i in every}) != 1:
        return None
    design = _design(every[0], unit, every)
    tables = [(sign, [design.table(by_seed[s]) for s in seeds]) for sign, by_seed in readings]

    def differences(weights: np.ndarray) -> np.ndarray:  # (draws, units) -> (draws, seeds) A - B
        return sum(sign * np.stack([design.score(weights @ t) for t in per_seed], axis=-1) for sign, per_seed in tables)

    rng = np.random.default_rng(seed)
    observed = differences(np.ones((1, design.size)))[0]
    per_seed = np.concatenate([differences(design.weights(rng, min(_BLOCK, draws - start)))
                               for start in range(0, draws, _BLOCK)])  # (draws, seeds)
    means = per_seed.mean(axis=1)
    n = len(seeds)
    crossed = np.empty(0)
    if n > 1:  # the same item draws, each with its own seed draw
        picked = rng.integers(0, n, size=(draws, n))
        resampled_seeds = np.take_along_axis(per_seed, picked, axis=1).mean(axis=1)
        crossed = means + math.sqrt(n / (n - 1)) * (resampled_seeds - means)
    return ItemInterval(design.units, observed, means, crossed, design.resampled, level)


def item_test(interval: ItemInterval, claim: Claim) -> ClaimTest:
    """Both one-sided bootstrap tests of `claim` over items alone (analysis.findings.verdicts.claim_test's calibration): each
    tail is the share of item draws on the wrong side of the threshold, with the add-one correction."""
    d, draws = claim.sign * interval.item_draws, len(interval.item_draws)
    return claim_test(claim, lambda t: (int((d <= t).sum()) + 1) / (draws + 1),
                      lambda t: (int((d >= t).sum()) + 1) / (draws + 1), len(interval.observed))


def crossed_test(interval: ItemInterval, claim: Claim) -> ClaimTest:
    """Both one-sided t-tests of `claim` on the crossed standard error and degrees of freedom."""
    n = len(interval.observed)
    if n < 2:
        return ClaimTest(1.0, 1.0, n)
    above, below = t_tails(claim.sign * interval.mean, interval.se, interval.df)
    return claim_test(claim, above, below, n)
