"""The findings report as Markdown: the family's table (seed and item intervals, tests, gate, verdict), the
registrations, withdrawn rows and checks (analysis.reports.findings_report judges them)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from armlm.analysis.findings.gate import gate_description
from armlm.analysis.findings.power import MAX_ITEM_FACTOR, MAX_SEEDS_REPORTED
from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.findings.verdicts import INTERIM, VERDICTS, WITHDRAWN
from armlm.analysis.tables.study_tables import markdown_rows

VERDICT_MEANINGS = {
    "reproduced": "the Holm-adjusted p-value is below the family's alpha and the 95 % interval of A - B lies in "
                  "the registered claim's region (above 0, above -margin, or inside +-margin)",
    "contradicted": "the Holm-adjusted p-value is below alpha and the interval lies in the region that refutes "
                    "the claim (below 0, below -margin, or wholly beyond one margin)",
    "unresolved": "every arm the row reads passed the gate, but the evidence reaches neither region at the "
                  "family's error rate",
    "not evidence": "an arm the row reads is less than the gate's nats below the unigram NLL of the same held-out "
                    "targets in some seed (the row would measure how far that arm is from learning), a side fails "
                    "one of the gate's floors in some seed (it would compare guesses, or scores at a task's floor), "
                    "or the row's "
                    "quantities must not be compared across its checkpoints (restricted candidates, other blocks)",
    WITHDRAWN: "found after its data not to test its registered claim (the note says why); it stays in the "
               "family, so Holm still counts it and no other row gains from its leaving",
    INTERIM: "the row's registration names pretraining seeds that have not all been read: its numbers are a look "
             "at the seeds so far, and its verdict waits for the rest (a verdict at every look would spend the "
             "error rate once per look)",
}


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
    observed, upper, factor = r.get("seeds_needed"), r.get("seeds_needed_sd_upper"), r.get("item_factor")
    oriented_high = r["ci_high"] if r["direction"] == "greater" else -r["ci_low"]
    if r["kind"] == "superiority" and oriented_high < r["smallest_effect"]:
        return (f"its interval lies below the smallest effect of interest ({r['smallest_effect']:g}): more seeds "
                "or items could contradict the claim, not show an effect of that size; 'no effect' is an equivalence "
                "claim, to register for new seeds")
    over_items = r.get("decided_by", "seeds") != "seeds"
    if over_items and observed != observed and factor == factor and factor is not None:  # the items alone hold it
        k = abs(int(factor))
        more = (f"over {MAX_ITEM_FACTOR} times the {r['items']}: not at this scale" if k > MAX_ITEM_FACTOR
                else f"~{k} times the {r['items']}" + (" at these seeds" if factor > 0 else ", and far more seeds"))
        # a power statement (analysis.reports.findings_report.power_columns), not this row's item-only verdict,
        # which is judged in its own Holm family and may differ
        return (f"not resolvable by more seeds (the {r['items']}' part of the interval alone leaves under 80 % power "
                f"at Holm's strictest step); {more}")
    if observed is None or observed != observed:
        return "needs two seeds or more"

    def seeds(n: float) -> str:
        return f"~{int(n)} seeds" if n <= MAX_SEEDS_REPORTED else f"over {MAX_SEEDS_REPORTED:,} seeds: not at this scale"

    held = f" with these {r['items']}" if over_items else ""
    at_upper = seeds(upper) if upper == upper else "none at this scale"
    return (f"{seeds(observed)}{held} (seed sd {r['sd']:.3g}); {at_upper} at the seed sd's upper 80 % limit "
            f"({r['sd_upper80']:.3g})")


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


def item_rule_text(alpha: float) -> str:
    """What the crossed interval is, and what the seed-only and item-only columns are (analysis.findings.items)."""
    level = f"{100 * (1 - alpha):g} %"
    return (f"Where both sides kept their items, the interval that decides is crossed: a bootstrap that resamples "
            f"the pretraining seeds and, independently, the items the claim generalises over (CoNLL dev documents, "
            f"each with all its sentences, or sentences; BLiMP pairs within each paradigm, or whole paradigms), "
            f"the same item draw for every seed and side; the {level} interval is the mean +- t times the draws' sd, "
            f"with Welch-Satterthwaite degrees of freedom, and its p is Holm-adjusted over the family. A row without "
            f"items is decided by the seed test. The seed-only (paired t) and item-only (percentile) intervals, each "
            f"with its verdict under Holm, are diagnostics: they show which source limits a row and never decide it "
            f"(the rule since 4 December 2026, issue 84; before it, a registration could require both to agree).")


def _finding_row(r: dict[str, Any]) -> list[Any]:
    """A row of the family's table: the finding, its test, both means, the deciding interval and its test, the
    seed-only and item-only diagnostics, the gate column and the verdict, with what would resolve it."""
    interval = f"{_number(r['difference'])} [{_number(r['ci_low'])}, {_number(r['ci_high'])}]"
    seed_only = f"[{_number(r['seed_low'])}, {_number(r['seed_high'])}] {r.get('seed_verdict') or ''}".rstrip()
    item_only = (f"{r['items']}: [{_number(r['item_low'])}, {_number(r['item_high'])}] {r.get('item_verdict') or ''}"
                 .rstrip() if r.get("items") else "-")
    note = "; ".join(x for x in (_power_text(r), r.get("gate_note") or "", r.get("note") or "") if x)
    marked = (" (re-registered after data)" if r.get("superseded")
              else " (registered after data)" if r.get("registered_after_data") else "")
    return [f"{r['finding']}{marked}", r["claim"], _test_text(r), _number(r["a_mean"]), _number(r["b_mean"]), interval,
            r.get("decided_by", "seeds"), r["n"], _p(r["p"]), _p(r["p_holm"]), seed_only, _p(r["p_sign_flip"]),
            item_only, _number(r["gate"], 2), f"**{r['verdict']}**", note]


def findings_markdown(table: pd.DataFrame, checks: pd.DataFrame, study: StudySpec, header: str) -> str:
    alpha, gate = study.alpha, study.gate
    lines = [header, "",
             f"One family: the {len(table)} registered findings of this study, Holm-adjusted together at a "
             f"family-wise error rate of {alpha:g}. Each difference is A - B per pretraining seed (paired: same seed, "
             f"data order and fine-tuning seeds), with its unadjusted {100 * (1 - alpha):g} % interval over what "
             "the `over` column names, and the exact sign-flip test's p over seeds beside it (reported, not judged: "
             "with n seeds it cannot fall below 2 / 2^n).",
             item_rule_text(alpha),
             (gate_description(study.arms, gate) if gate else "No learning gate is registered for this study."), ""]
    found = table.get("verdict", pd.Series(dtype=object))
    shown = [*VERDICTS, *(v for v in (WITHDRAWN, INTERIM) if (found == v).any())]
    lines += [f"- **{v}**: {VERDICT_MEANINGS[v]}." for v in shown]
    lines += ["", "What would resolve a row is 80 % power at Holm's strictest step (alpha / m) for the registered smallest "
              "effect (superiority), a true difference of 0 against the margin (non-inferiority), or equivalence "
              "shown at a true difference of 0, in the unit that limits it: seeds (at the observed seed sd and its "
              "upper 80 % confidence limit, the items as they are), or, where the items alone keep a crossed row "
              "unresolved, how many times its items.", "",
              *markdown_rows(["finding", "claim", "registered test", "A", "B", "A - B [95 % CI]", "over", "seeds",
                              "p", "p (Holm)", "seeds only [95 %]", "p (sign-flip)", "items only [95 %]", "gate",
                              "verdict", "what would resolve it / note"],
                             [_finding_row(r) for r in table.to_dict("records")])]
    lines += ["", "## Registrations", "", *markdown_rows(
        ["finding", "sides", "anchor", "justification of the margin or effect", "registered", "earlier registrations"],
        [[r["finding"], f"A = {r['a']}; B = {r['b']}", r["anchor"], r["justification"], r["registered"],
          r["superseded"] or "-"] for r in table.to_dict("records")])]
    if study.withdrawn:
        lines += ["", "## Withdrawn findings (registered earlier, no longer tested)", "", *markdown_rows(
            ["finding", "registered", "why"], [[fid, w.registered.text(), w.why]
                                               for fid, w in study.withdrawn.items()])]
    if not checks.empty:
        lines += ["", "## Checks (reported, not judged)", "", *markdown_rows(
            ["check", "what", "value", "per seed", "mean [95 % CI]", "gate of the arms read"],
            [[c["check"], c["what"], c["value"], c["per_seed"],
              f"{_number(c['mean'])} [{_number(c['ci_low'])}, {_number(c['ci_high'])}]", c["gate"]]
             for c in checks.to_dict("records")])]
    return "\n".join(lines) + "\n"


