"""Does a packed block's other documents change what a checkpoint predicts? The manipulation check of study=packing:
each pretraining run's own held-out loss on the same validation blocks and the same corruption draws, once with
attention across the documents of a block and once within each document (data.cross_document_attention), whichever
it was trained with. A run trained across documents that loses little when they are masked did not lean on them; a
run trained within documents that loses when they appear is distracted by them.

    python bench/document_context.py <root>/ar/seed1/pretrain <root>/ar_within/seed1/pretrain --batches 20
    python bench/document_context.py <root>/*/seed1/pretrain --out document_context.json

Printed per run: its own loss (val/loss, each objective's LM NLL per predicted token) and its own loss below the
unigram NLL of the same targets, across and within, and their differences. Each run's data settings are its own
(its .hydra/config.yaml): its corpus, tokenizer cache and block size.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import lightning as L
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.atomic import atomic_file  # noqa: E402
from armlm.common.provenance import armlm_commit  # noqa: E402
from armlm.training.lit_module import PretrainModule  # noqa: E402
from armlm.training.preflight import check_config  # noqa: E402
from armlm.training.setup import build  # noqa: E402

READ = ("val/loss", "val/own_below_unigram")  # the LM NLL per predicted token, and its margin below unigram


def run_config(run: Path) -> DictConfig:
    """The pretraining run's own settings (Hydra's .hydra/config.yaml), or a one-line error."""
    if not (run / ".hydra" / "config.yaml").is_file() or not (run / "checkpoints" / "last.ckpt").is_file():
        raise SystemExit(f"{run}: no .hydra/config.yaml or checkpoints/last.ckpt; give a pretraining run folder")
    return OmegaConf.load(run / ".hydra" / "config.yaml")


def held_out(run: Path, cfg: DictConfig, across: bool, batches: int | None) -> dict[str, float]:
    """The run's last checkpoint validated on its own validation split, with or without document attention."""
    cfg = OmegaConf.merge(cfg, {"data": {"cross_document_attention": across}})  # a new config: the run's is kept
    objective, model_config = check_config(cfg)
    datamodule = build(cfg.data, input_format=objective.input_format, seed=cfg.seed)
    datamodule.setup("fit")
    model_config.vocab_size = datamodule.vocabulary.size
    module = PretrainModule(model=asdict(model_config), objective=OmegaConf.to_container(cfg.objective, resolve=True),
                            optim=OmegaConf.to_container(cfg.optim, resolve=True), seed=cfg.seed,
                            built_objective=objective)
    trainer = L.Trainer(accelerator="cpu", devices=1, precision="32-true", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=batches or 1.0)
    [metrics] = trainer.validate(module, datamodule=datamodule, ckpt_path=str(run / "checkpoints" / "last.ckpt"),
                                 weights_only=True, verbose=False)
    return {name: float(metrics[name]) for name in READ if name in metrics}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="pretraining run folders")
    parser.add_argument("--batches", type=int, default=None, help="validation batches (default: the whole split)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    rows = []
    print("| run | trained | loss across | loss within | within - across | below unigram across | within |")
    print("|---|---|---|---|---|---|---|")
    for run in args.runs:
        cfg = run_config(run)
        across, within = held_out(run, cfg, True, args.batches), held_out(run, cfg, False, args.batches)
        trained_across = bool(cfg.data.get("cross_document_attention", True))
        rows.append({"run": str(run), "trained_across": trained_across, "across": across, "within": within})
        print(f"| {run} | {'across' if trained_across else 'within'} | {across['val/loss']:.4f} | "
              f"{within['val/loss']:.4f} | {within['val/loss'] - across['val/loss']:+.4f} | "
              f"{across.get('val/own_below_unigram', float('nan')):.4f} | "
              f"{within.get('val/own_below_unigram', float('nan')):.4f} |", flush=True)
    if args.out is not None:
        with atomic_file(args.out, "w") as f:
            json.dump({"batches": args.batches, "commit": armlm_commit(), "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
