"""A study's findings judged as one family: each row's registered claim tested on the paired per-seed
differences (analysis.findings.measures measures them), Holm's adjustment over every finding of the study, the common
learning gate, power for what is unresolved, and the report (report/findings.md and .csv). What a study registers
(alpha, gate, findings, checks, withdrawn rows) is analysis.findings.registrations.StudySpec; docs/guides/studies.md,
"Findings and verdicts", walks through it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure  # figures without pyplot: no backend, no global state

from armlm.analysis.findings.gate import gate_row
from armlm.analysis.findings.items import ItemInterval, crossed_test, item_interval, item_test
from armlm.analysis.findings.measures import describe, measure, side_items, values
from armlm.analysis.findings.power import crossed_needs, sd_upper_limit, seeds_for
from armlm.analysis.findings.registrations import StudySpec, at_registered_seeds
from armlm.analysis.findings.verdicts import (
    Claim,
    ClaimTest,
    PairedInterval,
    family_verdicts,
    holm,
    judge_claim,
    paired_interval,
    sign_flip_test,
)
from armlm.analysis.reports.findings_markdown import findings_markdown, precision_note, wall_time_note
from armlm.analysis.reports.registry import report_main
from armlm.analysis.reports.study_plots import plot_findings, save_figure
from armlm.analysis.tables import study_tables as S
from armlm.analysis.tables.study_runs import StudyRuns
from armlm.common.atomic import atomic_write_text
from armlm.common.errors import ArmlmError, ArmlmFileError


def power_columns(claim: Claim, interval: PairedInterval, items: ItemInterval | None, alpha: float) -> dict[str, Any]:
    """What would resolve a row, at Holm's strictest step (alpha / m, which no other row can loosen). Judged on seeds
    alone: the seeds it needs at the observed sd and at its upper 80 % confidence limit (3 seeds' sd can be far below
    the true one). Judged on its crossed interval: the seeds it needs with its items as they are (at the seed sd and
    its upper limit), or none where the item component alone keeps it unresolved, and then the items it needs."""
    sd, n = interval.sd, interval.n
    upper = sd_upper_limit(sd, n)
    if items is None or n < 2:
        observed, at_upper, factor = seeds_for(claim, sd, alpha), seeds_for(claim, upper, alpha), math.nan
    else:
        def needs(seed_sd: float) -> tuple[int | None, int | None]:
            return crossed_needs(claim, seed_sd ** 2 / n, items.item_variance, items.interaction, n, items.resampled,
                                 alpha)

        (crossed, factor), (crossed_upper, _) = needs(sd), needs(upper)
        observed = math.nan if crossed is None else crossed
        at_upper = math.nan if crossed_upper is None else crossed_upper
    return {"seeds_needed": observed, "sd": sd, "sd_upper80": upper, "seeds_needed_sd_upper": at_upper,
            "item_factor": factor}


def findings_table(root: str | Path, study: dict[str, Any], adjust: bool = True) -> pd.DataFrame:
    """One row per registered finding of `study` (its config as a dict), judged as one family."""
    return judge_family(StudyRuns.read(Path(root)), StudySpec.parse(study), adjust)


def item_columns(interval: ItemInterval | None, claim: Claim) -> tuple[dict[str, Any], ClaimTest | None,
                                                                        ClaimTest | None]:
    """A row's item and crossed columns, and its item-only and crossed tests (None where a side has no items)."""
    if interval is None:
        return {"items": "", **{c: math.nan for c in ("item_low", "item_high", "crossed_se", "crossed_df")}}, None, None
    return ({"items": interval.items, "item_low": interval.item_low, "item_high": interval.item_high,
             "crossed_se": interval.se, "crossed_df": interval.df},
            item_test(interval, claim), crossed_test(interval, claim) if len(interval.observed) > 1 else None)


def judge_family(runs: StudyRuns, study: StudySpec, adjust: bool = True) -> pd.DataFrame:
    findings, alpha = study.findings, study.alpha
    rows, tests, seed_tests, item_tests, gated = [], [], [], [], []
    for finding_id, finding in findings.items():
        claim = finding.test
        row = {"finding": finding_id, "claim": finding.claim, "anchor": finding.anchor,
               "kind": claim.kind, "direction": claim.direction, "margin": claim.margin,
               "smallest_effect": claim.smallest_effect, "justification": finding.justification,
               "registered": finding.registered.text(),
               "registered_after_data": bool(finding.registered.seen),
               "superseded": "; ".join(s.text() for s in finding.superseded),
               "a": describe(finding.a), "b": describe(finding.b)}
        measured = measure(runs, finding.a, finding.b)
        seeds, to_come, seeds_note = at_registered_seeds(finding.registered, measured.seeds)
        differences = [measured.a_values[s] - measured.b_values[s] for s in seeds]
        interval = paired_interval(differences, 1 - alpha)
        seed_test = judge_claim(interval, claim)
        flips = sign_flip_test(differences, claim)
        over_items = item_interval([side_items(runs, side, seeds) for side in (finding.a, finding.b)], seeds,
                                   1 - alpha, int(study.item_test.draws), int(study.item_test.seed), finding.items)
        items, item, crossed = item_columns(over_items, claim)
        deciding = crossed or seed_test
        low, high = ((over_items.crossed_low, over_items.crossed_high) if crossed
                     else (interval.low, interval.high))
        row.update(**items, p_sign_flip=math.nan if flips is None else flips.p,
                   seeds=seeds, n=interval.n, a_mean=_mean(measured.a_values, seeds),
                   b_mean=_mean(measured.b_values, seeds), difference=interval.mean, ci_low=low, ci_high=high,
                   decided_by=f"seeds and {over_items.items}" if crossed else "seeds", seed_low=interval.low,
                   seed_high=interval.high, p=deciding.p, p_seed=seed_test.p, p_items=math.nan if item is None else item.p,
                   seeds_to_come=to_come,
                   note="; ".join(x for x in (measured.not_comparable or ("" if seeds else "no seed has both sides"),
                                              seeds_note) if x),
                   **gate_row(runs, study.arms, study.gate, (finding.a, finding.b), seeds),
                   **power_columns(claim, interval, over_items if crossed else None, alpha / max(1, len(findings))))
        rows.append(row)
        tests.append(deciding)
        seed_tests.append(seed_test)
        item_tests.append(item)
        gated.append(row["gate_failed"] or bool(measured.not_comparable))  # not comparable: no evidence either
    table = pd.DataFrame(rows)
    if rows:
        table["p_holm"] = holm([t.p for t in tests]) if adjust else [t.p for t in tests]
        withdrawn = [w.text() if (w := f.withdrawn_after_data) else None for f in findings.values()]
        judged = family_verdicts(tests, gated, [bool(r["seeds_to_come"]) for r in rows], [r["note"] for r in rows],
                                 withdrawn, alpha, adjust, seed_tests, item_tests)
        for column in ("verdict", "deciding_verdict", "seed_verdict", "item_verdict", "note"):
            table[column] = [getattr(j, column) for j in judged]
    return table


def _mean(side: dict[int, float], seeds: list[int]) -> float:
    return sum(side[s] for s in seeds) / len(seeds) if seeds else math.nan


def checks_table(runs: StudyRuns, study: StudySpec) -> pd.DataFrame:
    """Quantities reported with their 95 % interval over seeds but never judged (convergence checks), each beside
    the study's gate over the arms it reads: a value from a run that did not learn is printed, and marked."""
    rows = []
    for check_id, check in study.checks.items():
        value = check.value
        per_seed = values(runs, value)
        interval = paired_interval(list(per_seed.values()))
        gate = gate_row(runs, study.arms, study.gate, (value, value), sorted(per_seed))
        rows.append({"check": check_id, "what": check.what, "value": describe(value),
                     "per_seed": [round(per_seed[s], 4) for s in sorted(per_seed)], "mean": interval.mean,
                     "ci_low": interval.low, "ci_high": interval.high, "n": interval.n,
                     "gate": "-" if not study.gate else f"**failed**: {gate['gate_note']}"
                     if gate["gate_failed"] else "passed" if per_seed else "no run read"})  # never a vacuous pass
    return pd.DataFrame(rows)


def write_findings(root: str | Path, spec: StudySpec) -> list[Path]:
    """report/findings.md, report/findings.csv and report/findings.png (the table as a picture) for the seeds present,
    of the registrations as the study read them (studies.run.registrations, or rewrite_findings from study.json)."""
    root = Path(root)
    runs = StudyRuns.read(root)  # every summary, result and report (and TensorBoard curves) read once
    table, checks = judge_family(runs, spec), checks_table(runs, spec)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "findings.csv", table.to_csv(index=False))
    seeds = sorted({s for r in table.get("seeds", pd.Series(dtype=object)).dropna() for s in r})
    header = (f"# Findings: {root}\n\nPretraining seeds paired by a row: {seeds}. {precision_note(runs.pretraining)} "
              f"{wall_time_note(S.stage_seconds(root))} {S.code_note(runs.pretraining)}").rstrip()
    atomic_write_text(out / "findings.md", findings_markdown(table, checks, spec, header))
    written = [out / "findings.md", out / "findings.csv"]
    drawn = int(table["difference"].notna().sum()) if "difference" in table else 0  # rows with seeds (plot_findings)
    if drawn:
        fig = Figure(figsize=(8, 1.2 + 0.45 * drawn))
        plot_findings(table, fig.subplots())
        save_figure(fig, out / "findings.png")
        written.append(out / "findings.png")
    return written


def rewrite_findings(root: Path) -> list[Path]:
    """The verdicts again, from the study its run kept in study.json."""
    settings = root / "study.json"
    if not settings.is_file():
        raise ArmlmFileError(f"{settings} is missing: run armlm study for this study first")
    study = json.loads(settings.read_text())["settings"]["study"]
    if not study.get("findings"):
        raise ArmlmError(f"the study in {root} defines no findings (study.findings)")
    return write_findings(root, StudySpec.parse(study))


def main() -> None:
    report_main(rewrite_findings, "`armlm report findings <study root>`: the verdicts again, from its study.json.")
