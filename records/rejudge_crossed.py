"""Re-judge every kept study's findings under the crossed rule of 4 December 2026 (issue 84), beside its frozen report.

    python records/rejudge_crossed.py [<record> ...]      (default: every records/<record>/report/findings.csv)

Each record's frozen report (report/findings.csv, report/study.yaml) stays as it was written. This reads the record's
runs with today's code and its registration as it stands (configs/study/<name>.yaml with its dated amendments, where
that config is still the record's registration: CURRENT; else the frozen one), with one change, the rule: a row with items is decided by its
crossed interval over seeds and items (analysis.findings.items), a row without by the seed test, Holm over the family. It
writes <record>/amended/2026-12-04-crossed/findings.md and .csv (today's full report of the family) and prints each
row's verdict as written beside today's. A registration whose gate names a rule since retired (`min_above_chance`, v1's
studies) is judged without it, and each row the frozen report found not evidence stays so: a gate changes no p-value,
and Holm counts gated rows either way, so this gives the verdicts the retired gate would give.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from armlm.analysis.findings.registrations import StudySpec  # noqa: E402
from armlm.analysis.reports.findings_markdown import findings_markdown  # noqa: E402
from armlm.analysis.reports.findings_report import checks_table, judge_family  # noqa: E402
from armlm.analysis.tables.study_runs import StudyRuns  # noqa: E402
from armlm.common.atomic import atomic_write_text  # noqa: E402
from armlm.common.errors import ArmlmError  # noqa: E402

AMENDMENT = "2026-12-04-crossed"
# record -> the config that is still its registration (amended since its report was frozen); v1's records
# (findings-cpu, embeddings-cpu) ran under registrations since replaced, kept only in their report/study.yaml
CURRENT = {"curricula-cpu": "curricula", "decomposition-gutenwiki-cpu": "decomposition_gutenwiki",
           "embeddings-v2-cpu": "embeddings", "findings-v2-cpu": "findings", "packing-cpu": "packing",
           "zeroshot-gutenwiki-cpu": "zeroshot_gutenwiki"}
NOT_EVIDENCE = "not evidence"


def spec_of(study: dict) -> tuple[StudySpec, bool]:
    """The frozen registration under today's rule, and whether its gate had to be carried over from the frozen report."""
    study = {**study, "item_test": {k: v for k, v in (study.get("item_test") or {}).items() if k != "decides"}}
    try:
        return StudySpec.parse(study), False
    except ArmlmError as err:
        if "unknown rules" not in str(err):  # only a retired rule is carried over; any other fault stands
            raise
        return StudySpec.parse({**study, "gate": None}), True


def rejudge(record: Path) -> pd.DataFrame:
    written = pd.read_csv(record / "report" / "findings.csv").set_index("finding")
    config = (REPO / "configs" / "study" / f"{CURRENT[record.name]}.yaml" if record.name in CURRENT
              else record / "report" / "study.yaml")
    study = yaml.safe_load(config.read_text())
    spec, carried = spec_of(study.get("study", study))
    runs = StudyRuns.read(record)
    table = judge_family(runs, spec)
    if carried:
        gated = table["finding"].map(lambda f: written.loc[f, "verdict"] == NOT_EVIDENCE)
        for column in ("verdict", "deciding_verdict", "seed_verdict"):
            table.loc[gated, column] = NOT_EVIDENCE
        table.loc[gated & table["item_verdict"].notna(), "item_verdict"] = NOT_EVIDENCE
    out = record / "amended" / AMENDMENT
    out.mkdir(parents=True, exist_ok=True)
    gate_note = (" Its gate names a rule since retired: the rows its frozen report found not evidence stay so."
                 if carried else "")
    header = (f"# Findings of {record.name}, re-judged under the crossed rule (4 December 2026, issue 84)\n\n"
              f"The frozen report is [report/findings.md](../../report/findings.md); this one reads the same runs and "
              f"registration with today's code, decided by the crossed interval where a row has items.{gate_note}")
    atomic_write_text(out / "findings.md", findings_markdown(table, checks_table(runs, spec), spec, header))
    atomic_write_text(out / "findings.csv", table.to_csv(index=False))
    table["written"] = table["finding"].map(written["verdict"])
    return table


def main(records: list[str]) -> None:
    folders = [Path(r) for r in records] or sorted(p.parent.parent for p in (REPO / "records").glob("*/report/findings.csv"))
    for record in folders:
        table = rejudge(record)
        print(f"== {record.name}")
        for r in table.to_dict("records"):
            moved = "MOVED" if r["written"] != r["verdict"] else ""
            print(f"  {r['finding']:30s} {r['written']:13s} -> {r['verdict']:13s} over {r['decided_by']:34s} "
                  f"{r['difference']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] {moved}")


if __name__ == "__main__":
    main(sys.argv[1:])
