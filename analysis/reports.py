"""`armlm report <kind> <folder> [...]`: rebuild a report from run or study folders, without running anything.

    armlm report study <root>            report.md, tables and figures of a study (analysis.study_report)
    armlm report findings <root>         the registered findings' verdicts (analysis.findings_report)
    armlm report blimp <root> [<root>]   BLiMP by objective and method across studies (analysis.blimp_report)
    armlm report embeddings <root>       the embeddings study's tables (analysis.embeddings_report)
    armlm report curves <root>           each objective's measures against its budget in words (analysis.curves_report)
    armlm report finetune <folder>       fine-tuning runs over seeds beside the baseline (analysis.finetune_results)
"""

from __future__ import annotations

import importlib
import sys

REPORTS = {"study": "analysis.study_report", "findings": "analysis.findings_report", "blimp": "analysis.blimp_report",
           "embeddings": "analysis.embeddings_report", "curves": "analysis.curves_report",
           "finetune": "analysis.finetune_results"}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    kind = sys.argv[1]
    if kind not in REPORTS:
        sys.exit(f"armlm report: unknown report {kind!r}; choose one of {', '.join(REPORTS)}")
    sys.argv = [f"armlm report {kind}", *sys.argv[2:]]
    importlib.import_module(REPORTS[kind]).main()
