"""A study's BLiMP table: every arm's zero-shot accuracy by scoring method, overall and per field (and per
phenomenon in the CSV), mean ± 95 % t interval over pretraining seeds, with the release's own models over
the same paradigms beside it (report/blimp.md and blimp.csv); and per paradigm beside the release's models
(report/blimp_paradigms.md). study_report.write_report writes it for every study whose
arms ran `armlm zeroshot`; several roots make one table (e.g. the findings and curricula studies' arms together):

    armlm report blimp <study root> [<another study root> ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure  # figures without pyplot: no backend, no global state
from scipy import stats

from armlm.analysis.reports.study_plots import save_figure
from armlm.analysis.tables import study_tables as S
from armlm.common.atomic import atomic_write_text
from armlm.common.errors import ArmlmError, ArmlmFileError

# The groups the table shows, in its order (fields last). A field spelled two ways in zeroshot.json written before
# zeroshot.blimp.field_name is one row (records written before it were rewritten: records/rewrite_schema3.py).
LEVELS = {"overall": 0, "phenomenon": 1, "field": 2}
PARADIGMS = {"paradigm": 0}  # the per-paradigm table's one level (zeroshot.json keeps every paradigm)
# The release's model whose per-paradigm preferences the paradigm table correlates every side with: a model that
# prefers systematically tracks an n-gram's preferences, and coin flips would not.
REFERENCE_MODEL = "5-gram"


def _shown(rows: list[dict], levels: dict[str, int] = LEVELS) -> list[dict]:
    return sorted((r for r in rows if r["level"] in levels), key=lambda r: levels[r["level"]])


def labelled_reports(roots: list[Path]) -> list[tuple[str, int, dict]]:
    """Every zeroshot.json under the roots, read once, as (arm, seed, report). With several roots an arm is named
    <root folder>/<arm>, since two studies may both have an `mlm` arm."""
    return [(f"{root.name}/{arm}" if len(roots) > 1 else arm, seed, report)
            for root in roots for (arm, seed), report in S.stage_reports(root, S.ZEROSHOT).items()]


def blimp_runs(reports: list[tuple[str, int, dict]], levels: dict[str, int] = LEVELS) -> pd.DataFrame:
    """One row per arm, seed, scoring method and group of the levels (by default overall, each field, each
    phenomenon): its accuracy, the interval over its pairs (zeroshot.json's bootstrap) and the pairs that tied (NaN
    where a report does not say)."""
    records = []
    for arm, seed, report in reports:
        for method, rows in report["blimp"]["results"].items():
            for row in _shown(rows, levels):
                records.append({"arm": arm, "seed": seed, "method": method, "level": row["level"],
                                "name": row["name"], "accuracy": row["accuracy"],
                                "ci_low": row.get("ci_low", float("nan")), "ci_high": row.get("ci_high", float("nan")),
                                "ties": row.get("ties", float("nan"))})
    return pd.DataFrame(records, columns=["arm", "seed", "method", "level", "name", "accuracy", "ci_low", "ci_high",
                                          "ties"])


def published_rows(reports: list[tuple[str, int, dict]], levels: dict[str, int] = LEVELS) -> pd.DataFrame:
    """The release's models (5-gram, LSTM, Transformer-XL, GPT-2) over the paradigms the runs scored, from the
    first zeroshot.json that carries them; empty when none does (the release's per-paradigm file was absent)."""
    for _, _, report in reports:
        published = _shown(report["blimp"].get("published", []), levels)
        if not published:
            continue
        models = [k for k in published[0] if k not in ("level", "name")]
        return pd.DataFrame([{"arm": model, "method": "published", "level": r["level"], "name": r["name"],
                              "mean": r[model]} for r in published for model in models])
    return pd.DataFrame(columns=["arm", "method", "level", "name", "mean"])


def one_release(zeroshot: list[tuple[str, int, dict]]) -> pd.DataFrame:
    """The release's models' scores, the same in every zero-shot report: every line is read against one 5-gram."""
    overall = {}
    for arm, seed, report in zeroshot:
        rows = published_rows([(arm, seed, report)])
        scores = tuple(sorted(rows.loc[rows["level"] == "overall", ["arm", "mean"]].itertuples(index=False)))
        if scores:
            overall.setdefault(scores, f"{arm}/seed{seed}")
    if len(overall) > 1:
        raise ArmlmError("the zero-shot reports score the release's models over different paradigms ("
                         + "; ".join(f"{where}: {dict(scores)}" for scores, where in overall.items())
                         + "): rescore them with the same blimp settings, so every line is read against one release")
    return published_rows(zeroshot)


def blimp_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, 95 % CI half-width and n over seeds per arm, method and group, and its ties summed over seeds (NaN
    where no report says)."""
    keys = ["arm", "method", "level", "name"]
    ties = runs.groupby(keys)["ties"].agg(lambda t: t.sum(min_count=1)).reset_index()
    return S.over_seeds(runs, keys, ["accuracy"]).drop(columns="quantity").merge(ties, on=keys, how="left")


def markdown(table: pd.DataFrame, published: pd.DataFrame, roots: list[Path]) -> str:
    shown = table[table["level"].isin(("overall", "field"))]
    columns = ["overall", *sorted(set(shown.loc[shown["level"] == "field", "name"]))]
    lines = [f"# BLiMP: {', '.join(str(r) for r in roots)}", "",
             "Accuracy (the good sentence scored strictly above the bad one), macro over paradigms as the release "
             "averages, mean ± 95 % t interval over pretraining seeds (no interval for one seed); each arm with "
             "every method its zero-shot stage ran. Chance is 0.5. Ties: the pairs whose two sentences scored "
             "alike, over all seeds; each counts as wrong here, and as right in BabyLM's 2025 pipeline and "
             "lm-evaluation-harness (both take the first of equal scores, the good sentence). The release's models "
             "(Warstadt et al. 2020) are averaged over the same paradigms, all 1,000 pairs each; phenomena are in "
             "blimp.csv.", ""]
    rows = [[arm, method, int(part["n"].max()), _ties(cells.at["overall", "ties"] if "overall" in cells.index else None),
             *(S.cell(cells.at[c, "mean"], cells.at[c, "ci95"]) if c in cells.index else "-" for c in columns)]
            for (arm, method), part in shown.groupby(["arm", "method"], sort=True) for cells in [part.set_index("name")]]
    rows += [[f"{model} (release)", "published", "-", "-",
              *(f"{cells[c]:.3f}" if c in cells.index else "-" for c in columns)]
             for model, part in published[published["level"].isin(("overall", "field"))].groupby("arm", sort=False)
             for cells in [part.set_index("name")["mean"]]]
    return "\n".join([*lines, *S.markdown_rows(["arm", "method", "seeds", "ties", *columns], rows)]) + "\n"


def _ties(ties: float | None) -> str:
    return "-" if ties is None or ties != ties else str(int(ties))  # NaN: reports that count no ties


def paradigm_markdown(table: pd.DataFrame, published: pd.DataFrame, roots: list[Path]) -> str:
    """One row per paradigm: each arm and method's accuracy (mean over seeds) beside the release's models, and a
    last row with each column's Pearson r with the release's 5-gram over the paradigms both scored."""
    rows = table[table["level"] == "paradigm"]
    sides = {f"{arm} · {method} (n={int(part['n'].max())})": part.set_index("name")["mean"]
             for (arm, method), part in rows.groupby(["arm", "method"], sort=True)}
    release = {f"{model} (release)": part.set_index("name")["mean"]
               for model, part in published[published["level"] == "paradigm"].groupby("arm", sort=False)}
    columns = {**sides, **release}
    lines = [f"# BLiMP per paradigm: {', '.join(str(r) for r in roots)}", "",
             "Accuracy per paradigm, mean over pretraining seeds (n), beside the release's models (Warstadt et al. "
             f"2020, all 1,000 pairs each). The last row: each column's Pearson r with the release's {REFERENCE_MODEL} "
             "over the paradigms both scored.", ""]
    cells = [[name, *(f"{v[name]:.3f}" if name in v.index else "-" for v in columns.values())]
             for name in sorted(set(rows["name"]))]
    reference = columns.get(f"{REFERENCE_MODEL} (release)")
    if reference is not None:
        cells.append([f"Pearson r with the {REFERENCE_MODEL}", *(_correlation(v, reference) for v in columns.values())])
    return "\n".join([*lines, *S.markdown_rows(["paradigm", *columns], cells)]) + "\n"


def _correlation(values: pd.Series, reference: pd.Series) -> str:
    shared = values.index.intersection(reference.index)
    if len(shared) < 3 or values[shared].nunique() < 2 or reference[shared].nunique() < 2:
        return "-"
    return f"{stats.pearsonr(values[shared], reference[shared]).statistic:.2f}"


def plot_overall(table: pd.DataFrame, published: pd.DataFrame, path: Path) -> None:
    """Overall accuracy per arm and method with its interval over seeds, beside chance and the release's models:
    where every bar sits on the chance line, no ranking of arms is read from it."""
    overall = table[table["level"] == "overall"].sort_values(["arm", "method"]).reset_index(drop=True)
    fig = Figure(figsize=(7.5, 0.9 + 0.32 * len(overall)))
    ax = fig.subplots()
    rows = range(len(overall))
    ax.errorbar(overall["mean"], rows, xerr=overall["ci95"].fillna(0), fmt="o", color="black", capsize=3)
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1, label="chance")
    for i, (model, part) in enumerate(published[published["level"] == "overall"].groupby("arm", sort=False)):
        ax.axvline(part["mean"].iloc[0], color=f"C{i}", linewidth=1, alpha=0.7, label=f"{model} (release)")
    ax.set_yticks(list(rows), [f"{a} · {m} (n={int(n)})" for a, m, n in
                               zip(overall["arm"], overall["method"], overall["n"], strict=True)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("BLiMP accuracy (macro over paradigms; mean, 95 % t interval over seeds)")
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path)


def write_blimp_report(*roots: str | Path, out: str | Path | None = None) -> list[Path]:
    """report/blimp.md, .csv and .png under the first root (or `out`), and blimp_paradigms.md where the runs kept
    their paradigms; nothing when no arm ran `armlm zeroshot`."""
    roots_ = [Path(r) for r in roots]
    reports = labelled_reports(roots_)
    runs = blimp_runs(reports)
    if runs.empty:
        return []
    folder = Path(out) if out is not None else roots_[0] / "report"
    folder.mkdir(parents=True, exist_ok=True)
    table = blimp_table(runs)
    atomic_write_text(folder / "blimp.csv", table.to_csv(index=False))
    published = published_rows(reports)
    atomic_write_text(folder / "blimp.md", markdown(table, published, roots_))
    plot_overall(table, published, folder / "blimp.png")
    written = [folder / "blimp.csv", folder / "blimp.md", folder / "blimp.png"]
    paradigms = blimp_runs(reports, PARADIGMS)
    if not paradigms.empty:  # zeroshot.json keeps every paradigm; the CSV stays at phenomena, as it always was
        text = paradigm_markdown(blimp_table(paradigms), published_rows(reports, PARADIGMS), roots_)
        atomic_write_text(folder / "blimp_paradigms.md", text)
        written.append(folder / "blimp_paradigms.md")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", help="study folders (`armlm study`'s root=)")
    parser.add_argument("--out", help="where the BLiMP tables and figure go (default: <first root>/report)")
    args = parser.parse_args()
    written = write_blimp_report(*args.roots, out=args.out)
    if not written:
        raise ArmlmFileError(f"no zeroshot.json under {args.roots} (<arm>/seed<k>/zeroshot/); run the studies' "
                             "zero-shot stages first")
    print("\n".join(str(p) for p in written))

