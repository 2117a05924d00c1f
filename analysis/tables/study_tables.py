"""Read a study folder (what `armlm study` writes) into tables, one row per run, and summarise them over
seeds as mean ± 95 % confidence interval (Student t, n - 1 degrees of freedom; none for one seed).

    <root>/<arm>/seed<k>/pretrain/summary.json
    <root>/<arm>/seed<k>/finetune/<task>-<variant>/results.json
    <root>/<arm>/seed<k>/diagnostics/diagnostics.json
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from scipy import stats

from armlm.analysis.tables.runs import FINETUNE_SEED_SUFFIX
from armlm.common.atomic import read_artefact
from armlm.common.errors import ArmlmError

# NER per-type scores and precision/recall stay in the CSVs but out of the Markdown tables.
SECONDARY_PREFIXES = ("f1_", "precision", "recall")


def arm_and_seed(path: Path, root: Path) -> tuple[str, int]:
    arm, seed_folder = path.relative_to(root).parts[:2]
    if not seed_folder.startswith("seed"):
        raise ArmlmError(f"{path} is not inside <root>/<arm>/seed<k>/; is {root} a study folder?")
    return arm, int(seed_folder.removeprefix("seed"))


def val_loss_kind(summary: dict[str, Any], path: Path) -> str:
    """Which tokens the run's val/loss averages, as its summary says."""
    if not summary.get("val_loss_kind"):
        raise ArmlmError(f"{path}: the summary does not say which tokens its val/loss averages; add "
                         "\"val_loss_kind\" to it")
    return summary["val_loss_kind"]


def logged_mask_share(metrics: dict[str, float]) -> float:
    """[MASK] inputs per input token in validation: 0 for an objective that logs no share at all (it inserts no
    [MASK], as AR), NaN where the summary does not hold it (a mixture's from before it was logged)."""
    return metrics.get("val/mask_share", 0.0)


def lowest_own_margin(margins: dict[str, float | None] | None) -> float | None:
    """The learning gate's reading of a summary's own_below_unigram: the lowest of a mixture's pooled and
    per-component margins (None: none recorded)."""
    known = [v for v in (margins or {}).values() if v is not None]
    return min(known) if known else None


def own_share(summary: dict[str, Any]) -> float | None:
    """The lowest own-loss margin as a share of its baseline (val/own_below_unigram over val/own_unigram, each
    scope), None where the summary lacks either."""
    shares = []
    for scope, margin in (summary.get("own_below_unigram") or {}).items():
        baseline = summary["metrics"].get("val/own_unigram" + ("" if scope == "all" else f"_{scope}"))
        if baseline:
            shares.append(margin / baseline)
    return min(shares) if shares else None


def pretraining_runs(root: Path) -> pd.DataFrame:
    """One row per run (None where a summary's writer did not measure a figure). The validation NLL sits in the column of its kind, val_nll_<val_loss_kind> (next_token
    for AR, masked_token for MLM, ...): kinds average different tokens and are never one column."""
    rows = []
    for path in sorted(root.glob("*/seed*/pretrain/summary.json")):
        arm, seed = arm_and_seed(path, root)
        s = read_artefact(path)
        kind = val_loss_kind(s, path)
        rows.append({"arm": arm, "seed": seed, "objective": s["objective"], "steps": s["steps"],
                     "tokens_seen": s["tokens_seen"], "pred_tokens_seen": s["pred_tokens_seen"],
                     f"val_nll_{kind}": s["val_loss"],  # other kinds' columns stay empty in this row
                     # NLL per target token, exact (AR) or a bound (masked diffusion): one column across objectives
                     "val_likelihood": s.get("val_likelihood"), "flops_seen": s.get("flops_seen"),
                     "val_likelihood_tag": s.get("val_likelihood_tag"),
                     # passes over the training slice (data.max_train_tokens) of a data-constrained run, and its
                     # size; NaN for runs on the whole split
                     "epochs": s.get("epochs") if s.get("max_train_tokens") else None,
                     "train_tokens": s.get("train_tokens") if s.get("max_train_tokens") else None,
                     "below_unigram": s["unigram_baseline"] - s["val_loss"], "unigram_baseline": s["unigram_baseline"],
                     # the learning gate's: the arm's own held-out loss below the unigram NLL of the same targets,
                     # the lowest of a mixture's pooled and per-component margins (train.py's own_below_unigram)
                     "own_below_unigram": lowest_own_margin(s.get("own_below_unigram")),
                     # true only in a summary from before the margins were logged (records/rewrite_schema3.py)
                     "own_approximate": s.get("own_below_unigram_approximate", False),
                     # the same margins as shares of their baselines (ELECTRA's detection loss and an MLM's
                     # masked-token loss sit on different scales), the lowest
                     "own_share_below_unigram": own_share(s),
                     "mask_share": logged_mask_share(s["metrics"]), "wall_seconds": s["wall_seconds"],
                     "precision": s.get("precision"),
                     "code": s.get("code") or "unknown",  # the commit the run ran on (older summaries name none)
                     "run": str(path.parent)})
    return pd.DataFrame(rows)


def primary_metrics(finetuning: pd.DataFrame) -> dict[str, str]:
    """Each task's primary metric, from the rows of finetuning_runs; a task whose runs disagree is an error."""
    if finetuning.empty:
        return {}
    found = finetuning.groupby("task", sort=False)["primary_metric"].unique()
    mixed = {task: sorted(names) for task, names in found.items() if len(names) > 1}
    if mixed:
        raise ArmlmError(f"runs of one task name different primary metrics: {mixed}; rerun the older ones")
    return {task: names[0] for task, names in found.items()}


def finetuning_runs(root: Path) -> pd.DataFrame:
    """One row per run, dev split and metric; `seed` is the pretraining seed, `finetune_seed` the run's own."""
    rows = []
    for path in sorted(root.glob("*/seed*/finetune/*/results.json")):
        arm, seed = arm_and_seed(path, root)
        r = read_artefact(path)
        variant = path.parent.name.removeprefix(f"{r['task']}-").split(FINETUNE_SEED_SUFFIX)[0]
        primary = r["primary_metric"]  # task.primary_metric: the metric its plot shows
        for split, scores in r["metrics"].items():
            for metric, value in scores.items():
                rows.append({"arm": arm, "seed": seed, "finetune_seed": r["seed"], "task": r["task"],
                             "variant": variant, "mode": r["mode"],
                             "attention": r["attention"], "split": split, "metric": metric, "value": value,
                             "baseline": r["majority_baseline"].get(split, {}).get(metric),
                             "input_mask_share": r.get("input_mask_share"), "primary_metric": primary,
                             "run": str(path.parent)})
    return pd.DataFrame(rows)


def per_checkpoint(finetuning: pd.DataFrame) -> pd.DataFrame:
    """The median over fine-tuning seeds of each checkpoint (arm, pretraining seed), task, variant, split and
    metric: one value per pretraining seed, as the GLUE protocol reports, so intervals are over seeds of
    pretraining and never count one checkpoint's fine-tuning runs as independent samples."""
    if finetuning.empty:
        return finetuning
    keys = ["arm", "seed", "task", "variant", "split", "metric"]
    firsts = finetuning.groupby(keys, sort=False)[["mode", "attention", "baseline", "input_mask_share"]].first()
    medians = finetuning.groupby(keys, sort=False).agg(value=("value", "median"),
                                                       finetune_runs=("finetune_seed", "nunique"))
    return medians.join(firsts).reset_index()


def stage_seconds(root: Path) -> pd.DataFrame:
    """Wall seconds of every stage (its stage.json: the sum over its launches, one killed with its driver counted to
    its stage's last checkpoint; NaN where a stage ran before the runner kept it), by arm and seed. `running`: a
    launch has not come back (in flight, or killed and not yet resumed), so its seconds are a part of its cost."""
    rows = []
    for path in sorted(root.glob("*/seed*/**/stage.json")):
        arm, seed = arm_and_seed(path, root)
        record = read_artefact(path)
        rows.append({"arm": arm, "seed": seed, "kind": record.get("kind"),
                     "stage": path.parent.relative_to(root).as_posix(), "seconds": record["seconds"],
                     "running": record.get("started_at") is not None})
    return pd.DataFrame(rows, columns=["arm", "seed", "kind", "stage", "seconds", "running"]).astype(
        {"seconds": float, "running": bool})


# What each stage kind's report is called in its stage folder: diagnostics (`armlm evaluate`), BLiMP scores (`armlm zeroshot`)
# and word-benchmark scores (`armlm embeddings`).
DIAGNOSTICS, ZEROSHOT, WORDS = "diagnostics/diagnostics.json", "zeroshot/zeroshot.json", "embed/words.json"
MILESTONES = "milestones"  # <arm>/seed<k>/milestones/chck_<N>M/zeroshot.json: BLiMP at each word milestone


def stage_reports(root: Path, report: str) -> dict[tuple[str, int], dict[str, Any]]:
    """One stage report (DIAGNOSTICS, ZEROSHOT or WORDS) per arm and seed."""
    return {arm_and_seed(p, root): read_artefact(p) for p in sorted(root.glob(f"*/seed*/{report}"))}


def independence_runs(reports: dict[tuple[str, int], dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for (arm, seed), report in reports.items():
        for kind, part in report.get("pairwise", {}).items():
            joint = part["headline_joint"]
            sequence = report["sequence"]
            rows.append({"arm": arm, "seed": seed, "kind": kind, "joint": joint,
                         # AR perplexity and MLM pseudo-perplexity are different quantities: two columns
                         "ppl": sequence.get("ppl", math.nan), "pseudo_ppl": sequence.get("pseudo_ppl", math.nan),
                         "p_ppl": part["rows"][joint]["p_ppl"], "u_ppl": part["rows"][joint]["u_ppl"],
                         "gap": part["gap_mean"][joint]})
    return pd.DataFrame(rows)


def gap_by_distance_runs(reports: dict[tuple[str, int], dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for (arm, seed), report in reports.items():
        for kind, part in report.get("pairwise", {}).items():
            rows += [{"arm": arm, "seed": seed, "kind": kind, "low": b["low"], "distance": b["distance"],
                      "pairs": b["pairs"], "gap": b["mean_gap"]} for b in part["gap_by_distance"]]
    return pd.DataFrame(rows)


def representation_runs(reports: dict[tuple[str, int], dict[str, Any]]) -> pd.DataFrame:
    """One row per arm, seed, layer and measure: shift_cosine@k, shift_cka@k, shift_left_cosine@k,
    shift_left_cka@k and the geometry metrics."""
    rows = []
    for (arm, seed), report in reports.items():
        part = report.get("representations")
        if part is None:
            continue
        for section in ("shift", "shift_left"):
            for k, layers in part[section].items():
                for row in layers:
                    rows += [{"arm": arm, "seed": seed, "layer": row["layer"], "measure": f"{section}_{name}@{k}",
                              "value": row[name]} for name in ("cosine", "cka")]
        for row in part["geometry"]:
            rows += [{"arm": arm, "seed": seed, "layer": row["layer"], "measure": name, "value": value}
                     for name, value in row.items() if name != "layer"]
    return pd.DataFrame(rows)


def mean_ci(values: pd.Series) -> pd.Series:
    """Mean, 95 % CI half-width (t with n - 1 degrees of freedom; NaN for n = 1) and n."""
    v = values.dropna().astype(float)
    n = len(v)
    half = stats.t.ppf(0.975, n - 1) * v.std(ddof=1) / math.sqrt(n) if n > 1 else float("nan")
    return pd.Series({"mean": v.mean() if n else float("nan"), "ci95": half, "n": n})


def over_seeds(runs: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    """Per group of `keys`, every column's mean, ci95 and n over seeds (long format: one row per column)."""
    if runs.empty:
        return pd.DataFrame(columns=[*keys, "quantity", "mean", "ci95", "n"])
    long = runs.melt(id_vars=[*keys, "seed"], value_vars=columns, var_name="quantity", value_name="_value")
    return long.groupby([*keys, "quantity"], sort=False)["_value"].apply(mean_ci).unstack().reset_index()


def finetune_feature_gap(finetuning: pd.DataFrame) -> pd.DataFrame:
    """Discrepancy measure (ii): fine-tuned minus feature-based score, paired by arm, seed, task, split
    and metric, for every arm that ran both."""
    if finetuning.empty:
        return pd.DataFrame()
    keys = ["arm", "seed", "task", "split", "metric"]
    full = finetuning[finetuning["variant"] == "full"].set_index(keys)["value"]
    features = finetuning[finetuning["variant"] == "features"].set_index(keys)["value"]
    both = pd.concat({"full": full, "features": features}, axis=1).dropna()
    return (both["full"] - both["features"]).rename("value").reset_index()


def markdown_rows(header: list[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """A Markdown table's lines: its header, the rule under it and a line per row of cells."""
    return [f"| {' | '.join(map(str, header))} |", "|" + "---|" * len(header),
            *(f"| {' | '.join(map(str, row))} |" for row in rows)]


def cell(mean: float, ci95: float, digits: int = 3) -> str:
    if mean != mean:
        return "-"
    return f"{mean:.{digits}f}" if ci95 != ci95 else f"{mean:.{digits}f} ± {ci95:.{digits}f}"


def code_note(codes: pd.DataFrame) -> str:
    """The commits behind the table: each pretraining run's summary.json names the code it ran on."""
    if codes.empty or "code" not in codes:
        return ""
    parts = []
    for commit, rows in codes.groupby("code", sort=True):
        runs = ", ".join(f"{a} seed {s}" for a, s in zip(rows["arm"], rows["seed"], strict=True)) if len(rows) <= 3 \
            else f"{len(rows)} runs"
        parts.append(f"{str(commit)[:7]} ({runs})")
    return "Code the pretraining runs ran on (their summary.json): " + "; ".join(parts) + "."
