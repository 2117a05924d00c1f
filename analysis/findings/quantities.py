"""What a side of a finding can read: one object per quantity, each saying how it reads its per-seed values from a
study's runs, how it reads in a report, and what else the findings ask of it (its task's majority baseline, its
items for the item test, whether it compares only on the same held-out blocks). The findings and gate code ask
the object; a new quantity is one class here and one entry in QUANTITIES. Each class's docstring is its grammar in
a side, `{arm: <arm>, <name>: <spec>, ...}`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from armlm.analysis.findings.items import BlimpItems, SentenceItems, blimp_items, read_items
from armlm.analysis.findings.sides import Side
from armlm.analysis.tables.runs import curve_by_steps
from armlm.analysis.tables.study_runs import NotComparable, StudyRuns, epoch_scores, scores
from armlm.common.errors import ArmlmError

SeedItems = dict[int, BlimpItems | SentenceItems]  # seed -> one reading's items


class Quantity:
    """A side's quantity: `name` is its key in a side ({arm: ..., <name>: <spec>, ...})."""

    name: str  # its key in a side
    same_blocks = False  # two sides of this quantity compare only on the same held-out blocks
    options: tuple[str, ...] = ()  # of a Side's metric, split and epoch, the ones it takes
    required_options: tuple[str, ...] = ()
    # a spec that is a mapping: its (required, optional) keys; None: a spec that is a name
    spec_keys: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    def spec_problem(self, spec: Any) -> str | None:
        """What is wrong with a side's spec for this quantity, in words; None where it is well formed."""
        if self.spec_keys is None:
            return None if isinstance(spec, str) and spec else f"{self.name} takes a name, not {spec!r}"
        required, optional = self.spec_keys
        if not isinstance(spec, Mapping) or set(required) - set(spec) or set(spec) - set(required) - set(optional):
            return (f"{self.name}={spec!r}; it takes {{{', '.join(required)}}}"
                    + (f" and optionally {{{', '.join(optional)}}}" if optional else ""))
        return None

    def values(self, runs: StudyRuns, side: Side) -> dict[int, float]:
        raise NotImplementedError

    def detail(self, side: Side) -> str:
        """What the side reads, after its arm, in a report."""
        spec = side.spec
        shown = ", ".join(f"{k}={v}" for k, v in spec.items()) if isinstance(spec, dict) else str(spec)
        return f"{self.name.replace('_', ' ')} {shown}"

    def majority_reads(self, side: Side) -> list[tuple[str, str, str | None]] | None:
        """(task-variant, metric, split) of each fine-tuned score the side averages, whose majority-class baselines
        the gate's min_above_majority reads; None for a side that is not a fine-tuned score."""
        return None

    def items(self, runs: StudyRuns, side: Side, seeds: list[int]) -> SeedItems | None:
        """seed -> the side's items for the item test (analysis.findings.items), for every seed; None where it has none."""
        return None


class Finetune(Quantity):
    """`finetune: <task>-<variant>, metric[, split][, epoch]`: the dev score, median over fine-tuning seeds; with
    `epoch: k`, the score logged after the run's k-th epoch (its scalars)."""

    name = "finetune"
    options, required_options = ("metric", "split", "epoch"), ("metric",)

    def values(self, runs: StudyRuns, side: Side) -> dict[int, float]:
        if side.epoch is not None:
            return epoch_scores(runs, side.arm, side.spec, side.metric, side.split, int(side.epoch))
        return scores(runs, side.arm, side.spec, side.metric, side.split)

    def detail(self, side: Side) -> str:
        after = f" after epoch {side.epoch}" if side.epoch is not None else ""
        return f"{self.name.replace('_', ' ')} {side.spec} {side.metric}{after}"

    def majority_reads(self, side: Side) -> list[tuple[str, str, str | None]] | None:
        return [(side.spec, side.metric, side.split)]

    def items(self, runs: StudyRuns, side: Side, seeds: list[int]) -> SeedItems | None:
        if runs.root is None:
            return None
        # one run per checkpoint: a median over fine-tuning seeds (<variant>-ft<j> folders) has no item resample
        found = {seed: read_items(runs.root / side.arm / f"seed{seed}" / "finetune" / side.spec,
                                  side.metric, side.epoch) for seed in seeds}
        return None if any(v is None for v in found.values()) else found  # type: ignore[return-value]


class FeaturesGap(Quantity):
    """`features_gap: <task>, metric[, split]`: fine-tuned minus feature-based score of the same checkpoint."""

    name = "features_gap"
    options, required_options = ("metric", "split"), ("metric",)
    detail = Finetune.detail  # read as a fine-tuned score is: its task, metric and epoch

    def values(self, runs: StudyRuns, side: Side) -> dict[int, float]:
        task, metric, split = side.spec, side.metric, side.split
        full = scores(runs, side.arm, f"{task}-full", metric, split)
        features = scores(runs, side.arm, f"{task}-features", metric, split)
        return {seed: full[seed] - features[seed] for seed in full.keys() & features.keys()}


class FinetuneMean(Quantity):
    """`finetune_mean: {variant, metrics: {task: metric}}`: the mean of several tasks' dev scores (a GLUE-style
    score), over the seeds every task has."""

    name = "finetune_mean"
    spec_keys = ("variant", "metrics"), ()

    def values(self, runs: StudyRuns, side: Side) -> dict[int, float]:
        each = [scores(runs, side.arm, *read) for read in self.majority_reads(side)]
        seeds = set.intersection(*(set(s) for s in each)) if each else set()
        return {seed: sum(s[seed] for s in each) / len(each) for seed in sorted(seeds)}

    def detail(self, side: Side) -> str:
        spec = side.spec
        tasks = ", ".join(f"{task} {metric}" for task, metric in spec["metrics"].items())
        return f"fine-tuned, mean of {tasks} ({spec['variant']})"

    def majority_reads(self, side: Side) -> list[tuple[str, str, str | None]]:
        spec = side.spec
        return [(f"{task}-{spec['variant']}", metric, None) for task, metric in spec["metrics"].items()]


class FromReports(Quantity):
    """A figure of each seed's stage report: `reports` names the StudyRuns field that holds them (diagnostics.json by
    default). A seed whose figure is NaN drops out where `drops_nan` (a benchmark that gave none)."""

    reports = "reports"
    drops_nan = False

    def values(self, runs: StudyRuns, side: Side) -> dict[int, float]:
        read = {seed: self.read(report, side.spec) for (arm, seed), report in getattr(runs, self.reports).items()
                if arm == side.arm}
        return {seed: v for seed, v in read.items() if not (self.drops_nan and math.isnan(v))}

    def read(self, report: dict[str, Any], spec: Any) -> float:
        raise NotImplementedError


def exact_only(report: dict[str, Any], why: str) -> None:
    if report.get("candidates") is not None:
        raise NotComparable(why.format(candidates=report["candidates"]))


class Pairwise(FromReports):
    """`pairwise: {kind, row, column}`: a row of the independence table (exact tables only)."""

    name = "pairwise"
    spec_keys = ("kind", "row", "column"), ()

    def read(self, report: dict[str, Any], spec: dict[str, Any]) -> float:
        exact_only(report, "scored on {candidates} candidates per position: restricted figures depend on the "
                           "candidate sets; run the diagnostics exactly (candidates=null)")
        return float(report["pairwise"][spec["kind"]]["rows"][spec["row"]][spec["column"]])


class Gap(FromReports):
    """`gap: {min_distance[, max_distance, kind]}`: the mean gap of the headline joint over the pairs at those
    distances, pooling kinds."""

    name = "gap"
    spec_keys = ("min_distance",), ("max_distance", "kind")

    def read(self, report: dict[str, Any], spec: dict[str, Any]) -> float:
        exact_only(report, "restricted candidate sets underestimate the gap (README, 'How many candidates?'); "
                           "run the diagnostics exactly (candidates=null)")
        low, high = int(spec["min_distance"]), int(spec.get("max_distance", 10**9))
        gaps = []
        for kind, part in report["pairwise"].items():
            if spec.get("kind", kind) != kind:
                continue
            per_pair = part["per_pair"]
            gaps += [g for d, g in zip(per_pair["distance"], per_pair["gap"][part["headline_joint"]])
                     if low <= d <= high]
        return sum(gaps) / len(gaps) if gaps else math.nan


class Representation(FromReports):
    """`representation: {measure, layer}`: e.g. shift_cosine@0.4 or shift_left_cosine@0.4 at layer `last`, or a
    geometry measure."""

    name = "representation"
    spec_keys = ("measure", "layer"), ()

    def read(self, report: dict[str, Any], spec: dict[str, Any]) -> float:
        part = report["representations"]
        measure, layer = str(spec["measure"]), spec["layer"]
        if "@" in measure:  # <section>_<cosine|cka>@<k>: shift_cosine@0.4 reads part["shift"]
            head, rate = measure.split("@")
            section, _, name = head.rpartition("_")
            if rate not in part.get(section, {}):
                raise NotComparable(f"a diagnostics report without representations.{section} at k={rate} (for "
                                    f"{measure}); run `armlm evaluate` again")
            rows = [{"layer": r["layer"], measure: r[name]} for r in part[section][rate]]
        else:
            rows = [{"layer": r["layer"], measure: r[measure]} for r in part["geometry"]]
        row = rows[-1] if layer == "last" else next(r for r in rows if r["layer"] == int(layer))
        return float(row[measure])


class Likelihood(FromReports):
    """`likelihood: <key>`: e.g. nll_per_token, exact for AR, the bound for bidirectional readers (`armlm evaluate`)."""

    name = "likelihood"
    same_blocks = True

    def read(self, report: dict[str, Any], key: str) -> float:
        if "likelihood" not in report:
            raise NotComparable("a diagnostics report without a likelihood section; run `armlm evaluate` with "
                                "likelihood.enabled=true")
        return float(report["likelihood"][key])


class Pretraining(Quantity):
    """`pretraining: <column>`: a column of the pretraining table, e.g. below_unigram or val_likelihood."""

    name = "pretraining"

    def values(self, runs: StudyRuns, side: Side) -> dict[int, float]:
        return {int(r["seed"]): float(r[side.spec]) for _, r in runs.pretraining_rows(side.arm).iterrows()}


def likelihood_tag(summary_tag: Any, run: str) -> str:
    """The validation tag of a run's NLL per target token (exact, or its bound), as its summary.json names it."""
    if not isinstance(summary_tag, str):
        raise NotComparable(f"{run} names no val_likelihood_tag: its objective logs no likelihood, or the run predates "
                            "the key; a plateau exit is read from that curve")
    return summary_tag


def past_exit(curve: pd.Series, spec: dict[str, Any]) -> float:
    """The curve (validation NLL by step) `steps` after its plateau exit, its first validation at or below `exit_at`
    nats, read at the first validation at or after that step. One level for every run: a run's own unigram
    baseline comes from its training slice, so repeated and fresh runs would exit at different heights. NaN (the
    seed drops out of the pair) when the run never left its plateau or ended too soon."""
    exited = curve[curve <= float(spec["exit_at"])]
    if exited.empty:
        return math.nan
    later = curve[curve.index >= exited.index[0] + int(spec["steps"])]
    return float(later.iloc[0]) if not later.empty else math.nan


class PastExit(Quantity):
    """`past_exit: {steps, exit_at}`: the validation NLL per target token (val_likelihood's tag) `steps` after the
    run's plateau exit, its first validation at or below exit_at nats (one level for every run)."""

    name = "past_exit"
    spec_keys = ("steps", "exit_at"), ()

    def values(self, runs: StudyRuns, side: Side) -> dict[int, float]:
        read = {int(r["seed"]): past_exit(curve_by_steps(Path(r["run"]), likelihood_tag(r["val_likelihood_tag"],
                                                                                         r["run"])), side.spec)
                for _, r in runs.pretraining_rows(side.arm).iterrows()}
        return {seed: value for seed, value in read.items() if value == value}  # NaN: no exit, or too short


class Zeroshot(FromReports):
    """`zeroshot: {method[, level, name]}`: BLiMP accuracy by `method` at `level` (overall, field, phenomenon,
    paradigm) and `name`."""

    name, reports = "zeroshot", "zeroshot"
    spec_keys = ("method",), ("level", "name")

    def read(self, report: dict[str, Any], spec: dict[str, Any]) -> float:
        results = report["blimp"]["results"]
        if spec["method"] not in results:
            raise ArmlmError(f"zeroshot method {spec['method']!r} was not scored ({sorted(results)}); add it to the "
                             "arm's zeroshot_settings")
        level, name = spec.get("level", "overall"), spec.get("name", "overall")
        for row in results[spec["method"]]:
            if row["level"] == level and row["name"] == name:
                return float(row["accuracy"])
        raise ArmlmError(f"BLiMP has no {level} {name!r} in this study's paradigms")

    def items(self, runs: StudyRuns, side: Side, seeds: list[int]) -> SeedItems | None:
        spec = side.spec
        if spec.get("level", "overall") != "overall" or any((side.arm, s) not in runs.zeroshot for s in seeds):
            return None
        found = {seed: blimp_items(runs.zeroshot[(side.arm, seed)], spec["method"]) for seed in seeds}
        return None if any(not items.accuracy for items in found.values()) else found  # a report without paradigms


class Words(FromReports):
    """`words: {benchmark, metric, layer}`: `armlm embeddings`'s scores (words.json): simlex999 or wordsim353 with
    spearman or rare_spearman, or analogies with semantic, syntactic or overall; layer static or k. A seed whose
    benchmark gave none drops out."""

    name, reports, drops_nan = "words", "words", True
    spec_keys = ("benchmark", "metric"), ("layer",)

    def read(self, report: dict[str, Any], spec: dict[str, Any]) -> float:
        layer = str(spec.get("layer", "static"))
        if layer not in report["layers"]:
            raise ArmlmError(f"words.json has layers {sorted(report['layers'])}, not {layer!r}")
        found = report["layers"][layer][spec["benchmark"]]
        value = found[spec["metric"]]["accuracy"] if spec["benchmark"] == "analogies" else found[spec["metric"]]
        return math.nan if value is None else float(value)


QUANTITIES: dict[str, Quantity] = {q.name: q for q in (
    Finetune(), FeaturesGap(), FinetuneMean(), Pairwise(), Gap(), Representation(), Likelihood(), Pretraining(),
    PastExit(), Zeroshot(), Words())}
