"""A study's findings judged as one family: each row's registered claim tested on the paired per-seed
differences (analysis.findings measures them), Holm's adjustment over every finding of the study, the common
learning gate, power for what is unresolved, and the report (report/findings.md and .csv).

The study config holds, beside its arms:

    alpha: 0.05                       # family-wise error rate (default analysis.verdicts.ALPHA)
    gate: {own_below_unigram: 0.5,    # nats: each arm's own held-out loss below the unigram NLL of the same
                                      # targets (train.py's summary; a mixture's every component), or
           min_below_unigram: 0.5,    # nats: the common-scale likelihood below it (evaluate.py; the earlier gate)
           min_discrimination: {alpha: 0.01},  # optional: a BLiMP side's per-paradigm preferences must reject
                                      # coin flips (chi-square) at alpha in every seed
           min_above_chance: 0.05,    # optional, superseded: a side with a chance score must beat it by this
           clear_by_mc_stderrs: 2}    # optional: a Monte-Carlo margin (the bound) clears the gate by this many
                                      # standard errors of its estimate
    findings:
      F1:
        claim: ..., anchor: ..., a: {...}, b: {...}
        test: {kind: superiority, direction: greater, smallest_effect: 0.02}   # or non_inferiority /
                                                  # equivalence with margin:
        justification: one line from the anchor for the effect and the margin
        registered: {date: 2026-11-24, commit: abc1234,   # (analysis.registrations checks it)
                     seeds: [1, 2, 3, 4, 5]}   # optional: the seeds its verdict is read on; until all are
                                               # read the row is 'interim', and other seeds are left out
        superseded: [{test: {...}, registered: {...}, why: ...}]   # earlier registrations, kept when a claim
                                                                   # changed after data were seen
    checks:                           # reported with their interval, never judged (e.g. convergence)
      ag_kl: {what: ..., value: {arm: ..., pairwise: {...}}}
    withdrawn:                        # findings registered earlier and no longer tested, listed in the report
      F3_ag_faithful: {registered: {date: ..., commit: ...}, why: ...}
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure  # figures without pyplot: no backend, no global state

from analysis import study as S
from analysis.findings import NotComparable, StudyRuns, describe, measure, values
from analysis.gate import gate_description, gate_row
from analysis.registrations import at_registered_seeds, registered_claim, registration_text, superseded_text
from analysis.study_plots import plot_findings
from analysis.study_report import save_figure
from analysis.verdicts import (
    ALPHA,
    MAX_SEEDS_REPORTED,
    VERDICTS,
    Claim,
    holm,
    judge_claim,
    paired_interval,
    sd_upper_limit,
    seeds_for,
    verdicts,
)
from common.atomic import atomic_write_text

INTERIM = "interim"  # not one of analysis.verdicts' verdicts: the absence of one until the registered seeds are read
VERDICT_MEANINGS = {
    "reproduced": "the Holm-adjusted p-value is below the family's alpha and the 95 % interval of A - B lies in "
                  "the registered claim's region (above 0, above -margin, or inside +-margin)",
    "contradicted": "the Holm-adjusted p-value is below alpha and the interval lies in the region that refutes "
                    "the claim (below 0, below -margin, or wholly beyond one margin)",
    "unresolved": "every arm the row reads passed the gate, but the evidence reaches neither region at the "
                  "family's error rate",
    "not evidence": "an arm the row reads is less than the gate's nats below the unigram NLL of the same held-out "
                    "targets in some seed (the row would measure how far that arm is from learning), a side scores "
                    "within the gate's floor of chance in some seed (it would compare guesses), or the row's "
                    "quantities must not be compared across its checkpoints (restricted candidates, other blocks)",
    INTERIM: "the row's registration names pretraining seeds that have not all been read: its numbers are a look "
             "at the seeds so far, and its verdict waits for the rest (a verdict at every look would spend the "
             "error rate once per look)",
}


def power_columns(claim: Claim, sd: float, n: int, alpha: float) -> dict[str, Any]:
    """Seeds a row needs at Holm's strictest step (alpha / m, which no other row can loosen), at the observed
    sd and at its upper 80 % confidence limit (3 seeds' sd can be far below the true one)."""
    upper = sd_upper_limit(sd, n)
    return {"seeds_needed": seeds_for(claim, sd, alpha), "seeds_needed_sd_upper": seeds_for(claim, upper, alpha),
            "sd": sd, "sd_upper80": upper}


def findings_table(root: str | Path, study: dict[str, Any], adjust: bool = True) -> pd.DataFrame:
    """One row per registered finding of `study` (its config as a dict), judged as one family."""
    return judge_family(StudyRuns.read(Path(root)), study, adjust)


def judge_family(runs: StudyRuns, study: dict[str, Any], adjust: bool = True) -> pd.DataFrame:
    findings = study.get("findings") or {}
    alpha = float(study.get("alpha", ALPHA))
    rows, tests, gated = [], [], []
    for finding_id, finding in findings.items():
        finding = dict(finding)
        claim = registered_claim(finding_id, finding)
        row = {"finding": finding_id, "claim": finding.get("claim", ""), "anchor": finding.get("anchor", ""),
               "kind": claim.kind, "direction": claim.direction, "margin": claim.margin,
               "smallest_effect": claim.smallest_effect, "justification": finding.get("justification", ""),
               "registered": registration_text(finding["registered"]),
               "registered_after_data": bool(finding["registered"].get("seen")),
               "superseded": "; ".join(superseded_text(s) for s in finding.get("superseded") or []),
               "a": describe(finding["a"]), "b": describe(finding["b"])}
        try:
            measured = measure(runs, finding["a"], finding["b"])
        except NotComparable as err:
            measured = {"seeds": [], "a_values": {}, "b_values": {}, "note": f"not comparable: {err}"}
        seeds, to_come, seeds_note = at_registered_seeds(finding["registered"], measured["seeds"])
        interval = paired_interval([measured["a_values"][s] - measured["b_values"][s] for s in seeds], 1 - alpha)
        test = judge_claim(interval, claim)
        row.update(seeds=seeds, n=interval.n, a_mean=_mean(measured["a_values"], seeds),
                   b_mean=_mean(measured["b_values"], seeds), difference=interval.mean, ci_low=interval.low,
                   ci_high=interval.high, p=test.p,
                   seeds_to_come=to_come,
                   note="; ".join(x for x in (measured.get("note", "") or ("" if seeds else "no seed has both sides"),
                                              seeds_note) if x),
                   **gate_row(runs, study, finding, seeds),
                   **power_columns(claim, interval.sd, interval.n, alpha / max(1, len(findings))))
        rows.append(row)
        tests.append(test)
        gated.append(row["gate_failed"] or bool(measured.get("note")))  # not comparable: no evidence either
    table = pd.DataFrame(rows)
    if rows:
        table["p_holm"] = holm([t.p for t in tests]) if adjust else [t.p for t in tests]
        table["verdict"] = verdicts(tests, gated, alpha, adjust)
        # a gate failed at a seed already read stays final; otherwise a row waits for its registered seeds
        own_seeds_to_come = table["seeds_to_come"].map(bool)
        # Holm: each row's adjusted p depends on every row's p, so no row of the family is final while one waits
        waiting = (own_seeds_to_come.any() if adjust else own_seeds_to_come) & ~pd.Series(gated, index=table.index)
        family_only = waiting & ~own_seeds_to_come
        table.loc[family_only, "note"] = [f"interim: its own seeds are read, the Holm family's are not{'; ' + n if n else ''}"
                                          for n in table.loc[family_only, "note"]]
        table.loc[waiting, "verdict"] = INTERIM
    return table


def _mean(side: dict[int, float], seeds: list[int]) -> float:
    return sum(side[s] for s in seeds) / len(seeds) if seeds else math.nan


def checks_table(runs: StudyRuns, study: dict[str, Any]) -> pd.DataFrame:
    """Quantities reported with their 95 % interval over seeds but never judged (convergence checks), each beside
    the study's gate over the arms it reads: a value from a run that did not learn is printed, and marked."""
    rows = []
    for check_id, check in (study.get("checks") or {}).items():
        value = dict(check["value"])
        per_seed = values(runs, value)
        interval = paired_interval(list(per_seed.values()))
        gate = gate_row(runs, study, {"a": value, "b": value}, sorted(per_seed))
        rows.append({"check": check_id, "what": check.get("what", ""), "value": describe(value),
                     "per_seed": [round(per_seed[s], 4) for s in sorted(per_seed)], "mean": interval.mean,
                     "ci_low": interval.low, "ci_high": interval.high, "n": interval.n,
                     "gate": "-" if not study.get("gate") else f"**failed**: {gate['gate_note']}"
                     if gate["gate_failed"] else "passed" if per_seed else "no run read"})  # never a vacuous pass
    return pd.DataFrame(rows)


def _number(x: Any, digits: int = 3) -> str:
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def _p(x: Any) -> str:
    return "-" if x is None or x != x else (f"{x:.2g}" if x < 0.001 else f"{x:.3f}")


def _test_text(r: dict[str, Any]) -> str:
    sign = ">" if r["direction"] == "greater" else "<"
    if r["kind"] == "superiority":
        return f"superiority, A - B {sign} 0; SESOI {r['smallest_effect']:g}"
    if r["kind"] == "non_inferiority":
        return f"non-inferiority, A - B {sign} {'-' if sign == '>' else '+'}{r['margin']:g}; SESOI {r['smallest_effect']:g}"
    return f"equivalence, \\|A - B\\| < {r['margin']:g}"


def _power_text(r: dict[str, Any]) -> str:
    if r["verdict"] != "unresolved":
        return ""
    observed, upper = r.get("seeds_needed"), r.get("seeds_needed_sd_upper")
    if observed is None or observed != observed:
        return "needs two seeds or more"

    def seeds(n: float) -> str:
        return f"~{int(n)} seeds" if n <= MAX_SEEDS_REPORTED else f"over {MAX_SEEDS_REPORTED:,} seeds: not at this scale"

    return f"{seeds(observed)} (sd {r['sd']:.3g}); {seeds(upper)} at the sd's upper 80 % limit ({r['sd_upper80']:.3g})"


def precision_note(pretraining: pd.DataFrame) -> str:
    """Which precision the pretraining runs trained at. A study resumed on another machine can train one config
    in bf16 where the CPU has bf16 units and in fp32 where not: a paired difference would then mix numerics."""
    if pretraining.empty or "precision" not in pretraining:
        return ""
    known = pretraining.dropna(subset=["precision"])
    by_precision = known.groupby("precision")[["arm", "seed"]].apply(
        lambda g: ", ".join(f"{a}/seed{s}" for a, s in zip(g["arm"], g["seed"], strict=True)))
    unknown = len(pretraining) - len(known)
    unrecorded = f" ({unknown} runs did not record it)" if unknown else ""
    if len(by_precision) <= 1:
        return f"Pretraining precision: {by_precision.index[0] if len(by_precision) else 'not recorded'}{unrecorded}."
    return ("**Mixed precision: paired differences across these runs mix numerics**: "
            + "; ".join(f"{p}: {runs}" for p, runs in by_precision.items()) + f"{unrecorded}.")


def wall_time_note(seconds: pd.DataFrame) -> str:
    """Minutes per seed: the sum of its stages' wall seconds over their launches (pauses and a busy machine
    included), with how many stages kept no time and how many are still running (counted so far)."""
    if seconds.empty:
        return ""
    parts = []
    for seed, rows in seconds.groupby("seed"):
        notes = [f"{k} of {len(rows)} stages {what}" for k, what in
                 ((int(rows["seconds"].isna().sum()), "untimed"), (int(rows["running"].sum()), "running, counted so far"))
                 if k]
        parts.append(f"seed {seed}: {rows['seconds'].sum() / 60:.0f}" + (f" ({'; '.join(notes)})" if notes else ""))
    return "Wall minutes per seed, the sum of its stages' launches: " + "; ".join(parts) + "."


def findings_markdown(table: pd.DataFrame, checks: pd.DataFrame, study: dict[str, Any], header: str) -> str:
    alpha = float(study.get("alpha", ALPHA))
    gate = study.get("gate")
    lines = [header, "",
             f"One family: the {len(table)} registered findings of this study, Holm-adjusted together at a "
             f"family-wise error rate of {alpha:g}. Each difference is A - B per pretraining seed (paired: same seed, "
             "data order and fine-tuning seeds), with its unadjusted 95 % Student-t interval over seeds.",
             (gate_description(study) if gate else "No learning gate is registered for this study."), ""]
    shown = [*VERDICTS, *([INTERIM] if (table.get("verdict", pd.Series(dtype=object)) == INTERIM).any() else [])]
    lines += [f"- **{v}**: {VERDICT_MEANINGS[v]}." for v in shown]
    lines += ["", "Seeds for 80 % power are at Holm's strictest step (alpha / m) for the registered smallest effect "
              "(superiority), a true difference of 0 against the margin (non-inferiority), or equivalence shown "
              "at a true difference of 0; at the observed sd and at its upper 80 % confidence limit.", "",
              "| finding | claim | registered test | A | B | A - B [95 % CI] | seeds | p | p (Holm) | gate | verdict "
              "| what would resolve it / note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        interval = f"{_number(r['difference'])} [{_number(r['ci_low'])}, {_number(r['ci_high'])}]"
        note = "; ".join(x for x in (_power_text(r), r.get("gate_note") or "", r.get("note") or "") if x)
        marked = (" (re-registered after data)" if r.get("superseded")
                  else " (registered after data)" if r.get("registered_after_data") else "")
        lines.append(f"| {r['finding']}{marked} | {r['claim']} | {_test_text(r)} | {_number(r['a_mean'])} "
                     f"| {_number(r['b_mean'])} | {interval} | {r['n']} | {_p(r['p'])} | {_p(r['p_holm'])} "
                     f"| {_number(r['gate'], 2)} | **{r['verdict']}** | {note} |")
    lines += ["", "## Registrations", "", "| finding | sides | anchor | justification of the margin or effect "
              "| registered | earlier registrations |", "|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        lines.append(f"| {r['finding']} | A = {r['a']}; B = {r['b']} | {r['anchor']} | {r['justification']} "
                     f"| {r['registered']} | {r['superseded'] or '-'} |")
    withdrawn = study.get("withdrawn") or {}
    if withdrawn:
        lines += ["", "## Withdrawn findings (registered earlier, no longer tested)", "", "| finding | registered | why |",
                  "|---|---|---|"]
        lines += [f"| {fid} | {registration_text(w.get('registered', {}))} | {w.get('why', '')} |" for fid, w in withdrawn.items()]
    if not checks.empty:
        lines += ["", "## Checks (reported, not judged)", "",
                  "| check | what | value | per seed | mean [95 % CI] | gate of the arms read |", "|---|---|---|---|---|---|"]
        for c in checks.to_dict("records"):
            lines.append(f"| {c['check']} | {c['what']} | {c['value']} | {c['per_seed']} "
                         f"| {_number(c['mean'])} [{_number(c['ci_low'])}, {_number(c['ci_high'])}] | {c['gate']} |")
    return "\n".join(lines) + "\n"


def write_findings(root: str | Path, study: dict[str, Any]) -> list[Path]:
    """report/findings.md, report/findings.csv and report/findings.png (the table as a picture) for the seeds present."""
    root = Path(root)
    runs = StudyRuns.read(root)  # every summary, result and report (and TensorBoard curves) read once
    table, checks = judge_family(runs, study), checks_table(runs, study)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "findings.csv", table.to_csv(index=False))
    seeds = sorted({s for r in table.get("seeds", pd.Series(dtype=object)).dropna() for s in r})
    header = (f"# Findings: {root}\n\nPretraining seeds paired by a row: {seeds}. {precision_note(runs.pretraining)} "
              f"{wall_time_note(S.stage_seconds(root))} {S.code_note(runs.pretraining)}").rstrip()
    atomic_write_text(out / "findings.md", findings_markdown(table, checks, study, header))
    written = [out / "findings.md", out / "findings.csv"]
    drawn = int(table["difference"].notna().sum()) if "difference" in table else 0  # rows with seeds (plot_findings)
    if drawn:
        fig = Figure(figsize=(8, 1.2 + 0.45 * drawn))
        plot_findings(table, fig.subplots())
        save_figure(fig, out / "findings.png")
        written.append(out / "findings.png")
    return written


def main() -> None:
    """`armlm report findings <study root>`: the verdicts again, from the study kept in study.json."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("root", help="a study folder (study.py's root=)")
    root = Path(parser.parse_args().root)
    settings = root / "study.json"
    if not settings.is_file():
        raise SystemExit(f"{settings} is missing: run armlm study for this study first")
    study = json.loads(settings.read_text())["settings"]["study"]
    if not study.get("findings"):
        raise SystemExit(f"the study in {root} defines no findings (study.findings)")
    print("\n".join(str(p) for p in write_findings(root, study)))


if __name__ == "__main__":
    main()
