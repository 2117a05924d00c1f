"""BabyLM 2025's own BLiMP scoring beside armlm's, on the same models (issue 86): each run is exported
(`armlm export`), the export is scored by babylm/evaluation-pipeline-2025's sentence_zero_shot code with the backend
its card names (run from a checkout of that repository, not copied into armlm), and the run itself by `armlm zeroshot`
with the matching method (causal: exact; mlm and mntp: PLL, GPT-BERT's read one position back). Both read the same
BLiMP files (the first --max-pairs pairs of each paradigm).

The rules differ at ties only: the pipeline picks a pair's sentence with torch.max, which returns the first index, and
the good sentence is always first, so a tie counts right (as in lm-evaluation-harness, whose np.argmax does the
same); armlm counts it wrong. So pair for pair the pipeline is right exactly where armlm is right or tied
(zeroshot.json's pair_outcomes and pair_ties), and every paradigm where that fails is listed: a disagreement.

    python bench/babylm_pipeline.py --pipeline <evaluation-pipeline-2025 checkout> --max-pairs 100 \\
        --model ar=outputs/ar/<time> --model mlm=outputs/mlm/<time> --json out.jsonl --markdown out.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from armlm.common.config import compose_config, data_dir
from armlm.interchange.export import run_export
from armlm.training.pretrained import load_pretrained
from armlm.zeroshot.run import run_zeroshot

METHOD_OF_BACKEND = {"causal": "exact", "mlm": "pll", "mntp": "pll"}  # armlm's method for the same conditionals


def blimp_subset(source: Path, out: Path, max_pairs: int | None) -> dict[str, list[dict]]:
    """The first `max_pairs` pairs of each paradigm, written as the release's files; {uid: pairs}."""
    out.mkdir(parents=True, exist_ok=True)
    kept = {}
    for path in sorted(source.glob("*.jsonl")):
        lines = path.read_text().splitlines()[:max_pairs]
        (out / path.name).write_text("\n".join(lines) + "\n")
        kept[path.stem] = [json.loads(line) for line in lines]
    return kept


def pipeline_picks(pipeline: Path, export: Path, backend: str, blimp: Path, out: Path) -> dict[str, list[str]]:
    """The pipeline's chosen sentence for every pair, by paradigm, in file order (its predictions.json)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(pipeline)}
    subprocess.run([sys.executable, "-m", "evaluation_pipeline.sentence_zero_shot.run", "--model_path_or_name",
                    str(export), "--backend", backend, "--task", "blimp", "--data_path", str(blimp),
                    "--save_predictions", "--output_dir", str(out)], cwd=pipeline, env=env, check=True,
                   capture_output=True, text=True)
    predictions = json.loads(next(out.rglob("predictions.json")).read_text())
    picks = {}
    for uid, entry in predictions.items():
        ordered = sorted(entry["predictions"], key=lambda p: int(p["id"].rsplit("_", 1)[1]))
        picks[uid] = [p["pred"] for p in ordered]
    return picks


def armlm_outcomes(run: str, method: str, blimp: Path, out: Path) -> tuple[dict[str, str], dict[str, str]]:
    """armlm's won/lost string per paradigm and its tied/untied string per paradigm (zeroshot.json)."""
    cfg = compose_config("zeroshot", [f"checkpoint={run}", f"methods=[{method}]", f"blimp.dir={blimp}",
                                      "bootstrap.resamples=100", f"output_dir={out}"])
    run_zeroshot(cfg)
    report = json.loads((out / "zeroshot.json").read_text())["blimp"]
    return report["pair_outcomes"][method], report["pair_ties"][method]


def compare(name: str, run: str, pipeline: Path, pairs: dict[str, list[dict]], blimp: Path, work: Path,
            backend: str | None = None) -> dict:
    backend = backend or load_pretrained(run).objective_class.babylm_backend
    if backend is None:
        raise SystemExit(f"{name}: no BabyLM backend reads its objective (docs/guides/babylm.md, 'Export them', says "
                         "which do and why)")
    export = work / "exports" / hashlib.sha1(str(Path(run).resolve()).encode()).hexdigest()[:12]
    if not export.is_dir():  # one export serves every backend a run is read by (run folders all end in pretrain/)
        run_export(compose_config("export", [f"checkpoint={run}", f"out={export}"]))
    method = METHOD_OF_BACKEND[backend]
    won, ties = armlm_outcomes(run, method, blimp, work / f"{name}-armlm")
    picks = pipeline_picks(pipeline, export, backend, blimp, work / f"{name}-pipeline")
    rows, disagreements = [], []
    for uid, paradigm in sorted(pairs.items()):
        right = [pick == pair["sentence_good"] for pick, pair in zip(picks[uid], paradigm, strict=True)]
        ours, tied = [c == "1" for c in won[uid]], [c == "1" for c in ties[uid]]
        n = len(paradigm)
        rows.append({"uid": uid, "pairs": n, "pipeline": sum(right) / n, "armlm": sum(ours) / n,
                     "armlm_ties": sum(tied)})
        # pair by pair: the pipeline is right where armlm is right or tied, and nowhere else
        if [o or t for o, t in zip(ours, tied, strict=True)] != right:
            disagreements.append(uid)
    pairs_total = sum(r["pairs"] for r in rows)
    return {"model": name, "run": str(run), "backend": backend, "armlm_method": method, "pairs": pairs_total,
            "paradigms": len(rows), "pipeline": sum(r["pipeline"] * r["pairs"] for r in rows) / pairs_total,
            "armlm": sum(r["armlm"] * r["pairs"] for r in rows) / pairs_total,
            "ties": sum(r["armlm_ties"] for r in rows), "paradigms_that_disagree": disagreements, "rows": rows}


def markdown(results: list[dict]) -> str:
    lines = ["| model | backend | armlm method | pairs | pipeline | armlm | armlm ties | paradigms where pipeline "
             "≠ armlm + ties |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['backend']} | {r['armlm_method']} | {r['pairs']} | {100 * r['pipeline']:.2f} "
                     f"| {100 * r['armlm']:.2f} | {r['ties']} | {len(r['paradigms_that_disagree'])} of "
                     f"{r['paradigms']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", type=Path, required=True, help="a checkout of babylm/evaluation-pipeline-2025")
    parser.add_argument("--model", action="append", required=True,
                        help="name=<armlm run folder or checkpoint>[@backend] (default: the backend its card names)")
    parser.add_argument("--blimp", type=Path, default=None, help="BLiMP's data folder (default: $ARMLM_DATA_DIR/blimp)")
    parser.add_argument("--max-pairs", type=int, default=None, help="the first pairs of each paradigm (default: all)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        blimp = work / "blimp"
        pairs = blimp_subset(args.blimp or data_dir() / "blimp", blimp, args.max_pairs)
        results = []
        for spec in args.model:
            name, _, run = spec.partition("=")
            run, _, backend = run.partition("@")
            results.append(compare(name, run, args.pipeline, pairs, blimp, work, backend or None))
            print(markdown(results[-1:]).splitlines()[-1], flush=True)
    table = markdown(results)
    print(table)
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in results))
    if args.markdown:
        args.markdown.write_text(table + "\n")


if __name__ == "__main__":
    main()
