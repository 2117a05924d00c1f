"""What a study's findings measure: each compares a quantity A with a quantity B, measured once per
pretraining seed and paired across the two sides (analysis.findings_report judges the family).

A finding (in the study config, `study.findings.<id>`) reads:

    claim: MLM fine-tuned bidirectionally beats AR fine-tuned causally on CoNLL-2003
    anchor: BERT (Devlin et al. 2019), Table 5: ...
    a: {arm: mlm, finetune: conll2003-full, metric: f1}
    b: {arm: ar, finetune: conll2003-full, metric: f1}
    test: {kind: superiority, direction: greater, smallest_effect: 0.02}   # registered (findings_report)

A side names its arm and one quantity (QUANTITIES); its value for a seed comes from that seed's runs:

    finetune: <task>-<variant>, metric[, split][, epoch]  dev score, median over fine-tuning seeds; with epoch: k,
                                                   the score logged after the run's k-th epoch (its scalars)
    features_gap: <task>, metric[, split]          fine-tuned minus feature-based score of the same checkpoint
    finetune_mean: {variant, metrics: {task: metric}}  the mean of several tasks' dev scores (a GLUE-style score),
                                                   over the seeds every task has
    pairwise: {kind, row, column}                  a row of the independence table (exact tables only)
    gap: {min_distance[, max_distance, kind]}      mean independence gap of the pairs at those distances
    representation: {measure, layer}               e.g. shift_cosine@0.4 or shift_left_cosine@0.4 at layer `last`
    likelihood: <key>                              e.g. nll_per_token: AR exact, bidirectional bound (diagnostics)
    pretraining: <column>                          e.g. below_unigram, val_likelihood
    words: {benchmark, metric, layer}               embeddings.py's scores (words.json): benchmark simlex999 or
                                                   wordsim353 with metric spearman or rare_spearman, or analogies
                                                   with metric semantic, syntactic or overall; layer static or k
    past_exit: {steps, exit_at}                     the validation NLL per target token (val_likelihood's tag)
                                                   `steps` after the run's plateau exit: its first validation
                                                   at or below exit_at nats (one level for every run)

A side may add `relative_to: <arm>`: its value is then the quantity's change from that arm to its own, per seed
(e.g. the validation NLL at 16 epochs minus at 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import study as S
from analysis.runs import FINETUNE_SEED_SUFFIX, curve_by_steps
from common.errors import ArmlmError
from common.scalars import run_scalars
from finetune.task_module import metric_tag

QUANTITIES = ("finetune", "features_gap", "finetune_mean", "pairwise", "gap", "representation", "likelihood",
              "pretraining", "past_exit", "zeroshot", "words")
# The score of a guess, for quantities that have one: a BLiMP pair is a choice between two sentences. The study's
# gate (min_above_chance) refuses a row whose arm scores near it, where a difference would compare two guesses.
CHANCE = {"zeroshot": 0.5}


@dataclass
class StudyRuns:
    """What the findings read, one entry per (arm, pretraining seed)."""

    pretraining: pd.DataFrame  # analysis.study.pretraining_runs
    finetuning: pd.DataFrame  # analysis.study.per_checkpoint (median over fine-tuning seeds)
    reports: dict[tuple[str, int], dict[str, Any]]  # diagnostics.json per arm and seed
    zeroshot: dict[tuple[str, int], dict[str, Any]]  # zeroshot.json per arm and seed
    words: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)  # words.json per arm and seed
    root: Path | None = None  # the study folder, where sides read per-run files (epoch scores, items.json)

    @staticmethod
    def read(root: Path) -> StudyRuns:
        return StudyRuns(S.pretraining_runs(root), S.per_checkpoint(S.finetuning_runs(root)),
                         S.diagnostic_reports(root), S.zeroshot_reports(root), S.word_reports(root), root)


class NotComparable(ValueError):
    """A quantity exists but must not be compared across checkpoints (e.g. restricted candidate sets)."""


def quantity_of(side: dict[str, Any]) -> str:
    named = [q for q in QUANTITIES if q in side]
    if len(named) != 1 or "arm" not in side:
        raise ArmlmError(f"a finding's side needs an arm and exactly one of {QUANTITIES}; got {sorted(side)}")
    return named[0]


def chance_of(side: dict[str, Any]) -> float | None:
    """The chance score of the side's quantity, or None where it has none (or the side is a difference)."""
    return None if side.get("relative_to") else CHANCE.get(quantity_of(side))


def _score(runs: StudyRuns, arm: str, task_variant: str, metric: str, split: str | None,
           column: str = "value") -> dict[int, float]:
    """seed -> the fine-tuned dev score (or, column="baseline", the majority-class baseline of the same metric)."""
    f = runs.finetuning
    if f.empty:
        return {}
    task, _, variant = task_variant.partition("-")
    rows = f[(f["arm"] == arm) & (f["task"] == task) & (f["variant"] == variant) & (f["metric"] == metric)]
    if split is not None:
        rows = rows[rows["split"] == split]
    elif rows["split"].nunique() > 1:
        raise ArmlmError(f"{task_variant} has several dev splits {sorted(rows['split'].unique())}; name one with split:")
    return {int(seed): float(value) for seed, value in zip(rows["seed"], rows[column])}


def epoch_scores(runs: StudyRuns, arm: str, task_variant: str, metric: str, split: str | None,
                 epoch: int) -> dict[int, float]:
    """seed -> the dev score logged at the end of fine-tuning epoch `epoch` (1-based), the median over the
    checkpoint's fine-tuning runs: read from each run's scalars (TensorBoard, or a record's scalars.csv)."""
    if runs.root is None:
        raise ArmlmError("a side that reads an epoch (epoch:) needs the study folder's runs")
    task = task_variant.partition("-")[0]
    tag = metric_tag(task, split or "validation", metric)
    out = {}
    for seed_folder in sorted(runs.root.glob(f"{arm}/seed*")):
        scores = []
        for folder in sorted((seed_folder / "finetune").glob(f"{task_variant}*")):
            if folder.name != task_variant and not folder.name.startswith(task_variant + FINETUNE_SEED_SUFFIX):
                continue
            frame = run_scalars(folder)
            if tag not in frame or "epoch" not in frame:
                raise ArmlmError(f"{folder} logged no {tag!r} by epoch; its tags are {sorted(frame.columns)}")
            logged = frame[tag].dropna()
            at = logged[frame["epoch"].reindex(logged.index).to_numpy() == epoch - 1]
            if at.empty:
                raise ArmlmError(f"{folder} has no {tag} after epoch {epoch} (it logged epochs "
                                 f"{sorted({int(e) + 1 for e in frame['epoch'].reindex(logged.index).dropna()})})")
            scores.append(float(at.iloc[-1]))
        if scores:
            out[int(seed_folder.name.removeprefix("seed"))] = float(np.median(scores))
    return out


def above_majority(runs: StudyRuns, side: dict[str, Any]) -> dict[int, float] | None:
    """seed -> how far a fine-tuned side scores above the majority-class baseline of its task(s) (a mean over tasks
    for finetune_mean); None for a side that is not a fine-tuned score (or is a difference between arms)."""
    quantity = quantity_of(side)
    if side.get("relative_to") or quantity not in ("finetune", "finetune_mean"):
        return None
    spec = side[quantity]
    reads = ([(f"{task}-{spec['variant']}", metric, None) for task, metric in spec["metrics"].items()]
             if quantity == "finetune_mean" else [(spec, side["metric"], side.get("split"))])
    margins = [{seed: value - _score(runs, side["arm"], *read, column="baseline")[seed]
                for seed, value in _score(runs, side["arm"], *read).items()} for read in reads]
    seeds = set.intersection(*(set(m) for m in margins))
    return {seed: sum(m[seed] for m in margins) / len(margins) for seed in sorted(seeds)}


def _pairwise(report: dict[str, Any], spec: dict[str, Any]) -> float:
    if report.get("candidates") is not None:
        raise NotComparable(f"scored on {report['candidates']} candidates per position: restricted figures depend "
                            "on the candidate sets; run the diagnostics exactly (candidates=null)")
    return float(report["pairwise"][spec["kind"]]["rows"][spec["row"]][spec["column"]])


def _gap(report: dict[str, Any], spec: dict[str, Any]) -> float:
    """Mean gap of the headline joint over the pairs whose distance lies in [min, max], pooling kinds."""
    if report.get("candidates") is not None:
        raise NotComparable("restricted candidate sets underestimate the gap (README, 'How many candidates?'); "
                            "run the diagnostics exactly (candidates=null)")
    low, high = int(spec["min_distance"]), int(spec.get("max_distance", 10**9))
    gaps = []
    for kind, part in report["pairwise"].items():
        if spec.get("kind", kind) != kind:
            continue
        per_pair = part["per_pair"]
        gaps += [g for d, g in zip(per_pair["distance"], per_pair["gap"][part["headline_joint"]]) if low <= d <= high]
    return sum(gaps) / len(gaps) if gaps else math.nan


def _representation(report: dict[str, Any], spec: dict[str, Any]) -> float:
    part = report["representations"]
    measure, layer = str(spec["measure"]), spec["layer"]
    if "@" in measure:  # <section>_<cosine|cka>@<k>: shift_cosine@0.4 reads part["shift"], shift_left_cka@0.4
        # part["shift_left"]
        head, rate = measure.split("@")
        section, _, name = head.rpartition("_")
        if rate not in part.get(section, {}):  # e.g. {} in reports written before it (common.migrations)
            raise NotComparable(f"a diagnostics report without representations.{section} at k={rate} (for {measure}); "
                                "run evaluate.py again")
        rows = [{"layer": r["layer"], measure: r[name]} for r in part[section][rate]]
    else:
        rows = [{"layer": r["layer"], measure: r[measure]} for r in part["geometry"]]
    row = rows[-1] if layer == "last" else next(r for r in rows if r["layer"] == int(layer))
    return float(row[measure])


def _likelihood(report: dict[str, Any], key: str) -> float:
    if "likelihood" not in report:
        raise NotComparable("a diagnostics report without a likelihood section; run evaluate.py with "
                            "likelihood.enabled=true")
    return float(report["likelihood"][key])


def _blimp(report: dict[str, Any], spec: dict[str, Any]) -> float:
    """BLiMP accuracy by `method` at `level` ('overall', 'field', 'phenomenon', 'paradigm') and `name`."""
    results = report["blimp"]["results"]
    if spec["method"] not in results:
        raise ArmlmError(f"zeroshot method {spec['method']!r} was not scored ({sorted(results)}); add it to the "
                         "arm's zeroshot_settings")
    level, name = spec.get("level", "overall"), spec.get("name", "overall")
    for row in results[spec["method"]]:
        if row["level"] == level and row["name"] == name:
            return float(row["accuracy"])
    raise ArmlmError(f"BLiMP has no {level} {name!r} in this study's paradigms")


def _words(report: dict[str, Any], spec: dict[str, Any]) -> float:
    """A word-benchmark score of one layer's vectors (NaN when the benchmark gave none, e.g. no rare pair)."""
    layer = str(spec.get("layer", "static"))
    if layer not in report["layers"]:
        raise ArmlmError(f"words.json has layers {sorted(report['layers'])}, not {layer!r}")
    scores = report["layers"][layer][spec["benchmark"]]
    value = scores[spec["metric"]]["accuracy"] if spec["benchmark"] == "analogies" else scores[spec["metric"]]
    return math.nan if value is None else float(value)


def likelihood_blocks(runs: StudyRuns, side: dict[str, Any]) -> dict[int, str]:
    """seed -> the fingerprint of the held-out blocks a likelihood side was scored on."""
    return {seed: report["likelihood"]["blocks_fingerprint"] for (arm, seed), report in runs.reports.items()
            if arm == side["arm"] and "likelihood" in report}


def values(runs: StudyRuns, side: dict[str, Any]) -> dict[int, float]:
    """seed -> the side's value for every seed that has it (its change from `relative_to`'s, if given)."""
    if side.get("relative_to"):
        plain = {k: v for k, v in side.items() if k != "relative_to"}
        own, reference = values(runs, plain), values(runs, {**plain, "arm": side["relative_to"]})
        return {seed: own[seed] - reference[seed] for seed in own.keys() & reference.keys()}
    quantity, arm = quantity_of(side), side["arm"]
    spec = side[quantity]
    if quantity == "finetune":
        if side.get("epoch") is not None:
            return epoch_scores(runs, arm, spec, side["metric"], side.get("split"), int(side["epoch"]))
        return _score(runs, arm, spec, side["metric"], side.get("split"))
    if quantity == "features_gap":
        full = _score(runs, arm, f"{spec}-full", side["metric"], side.get("split"))
        features = _score(runs, arm, f"{spec}-features", side["metric"], side.get("split"))
        return {seed: full[seed] - features[seed] for seed in full.keys() & features.keys()}
    if quantity == "finetune_mean":
        scores = [_score(runs, arm, f"{task}-{spec['variant']}", metric, None)
                  for task, metric in spec["metrics"].items()]
        seeds = set.intersection(*(set(s) for s in scores)) if scores else set()
        return {seed: sum(s[seed] for s in scores) / len(scores) for seed in sorted(seeds)}
    if quantity == "pretraining":
        return {int(r["seed"]): float(r[spec]) for _, r in _pretraining_rows(runs, arm).iterrows()}
    if quantity == "past_exit":
        read = {int(r["seed"]): past_exit(curve_by_steps(Path(r["run"]), likelihood_tag(r["val_likelihood_tag"], r["run"])),
                                          spec) for _, r in _pretraining_rows(runs, arm).iterrows()}
        return {seed: value for seed, value in read.items() if value == value}  # NaN: no exit, or too short
    if quantity == "zeroshot":
        return {seed: _blimp(report, spec) for (a, seed), report in runs.zeroshot.items() if a == arm}
    if quantity == "words":
        read = {seed: _words(report, spec) for (a, seed), report in runs.words.items() if a == arm}
        return {seed: value for seed, value in read.items() if not math.isnan(value)}
    read = {"pairwise": _pairwise, "gap": _gap, "representation": _representation, "likelihood": _likelihood}[quantity]
    return {seed: read(report, spec) for (a, seed), report in runs.reports.items() if a == arm}


def describe(side: dict[str, Any]) -> str:
    quantity = quantity_of(side)
    spec = side[quantity]
    since = f" minus {side['relative_to']}'s" if side.get("relative_to") else ""
    if quantity == "finetune_mean":
        tasks = ", ".join(f"{task} {metric}" for task, metric in spec["metrics"].items())
        return f"{side['arm']}: fine-tuned, mean of {tasks} ({spec['variant']}){since}"
    after = f" after epoch {side['epoch']}" if side.get("epoch") is not None else ""
    detail = (f"{spec} {side['metric']}{after}" if quantity in ("finetune", "features_gap") else
              ", ".join(f"{k}={v}" for k, v in spec.items()) if isinstance(spec, dict) else str(spec))
    return f"{side['arm']}: {quantity.replace('_', ' ')} {detail}{since}"


def _pretraining_rows(runs: StudyRuns, arm: str) -> pd.DataFrame:
    return runs.pretraining[runs.pretraining["arm"] == arm] if not runs.pretraining.empty else pd.DataFrame()


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


def measure(runs: StudyRuns, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Both sides' per-seed values and the seeds they share. Likelihood sides compare only on the same held-out
    blocks (NotComparable otherwise)."""
    a_values, b_values = values(runs, a), values(runs, b)
    if all(quantity_of(side) == "likelihood" for side in (a, b)):
        blocks_a, blocks_b = likelihood_blocks(runs, a), likelihood_blocks(runs, b)
        differing = sorted(s for s in blocks_a.keys() & blocks_b.keys() if blocks_a[s] != blocks_b[s]
                           or blocks_a[s] is None)  # None: a report from before the fingerprint (common.migrations)
        if differing:
            raise NotComparable(f"seeds {differing} were scored on different held-out blocks (or ones their report "
                                "does not record); diagnose both arms on the same corpus, block size and blocks")
    return {"seeds": sorted(a_values.keys() & b_values.keys()), "a_values": a_values, "b_values": b_values}
