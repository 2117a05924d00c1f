"""Export parity: every objective x position kind, trained briefly, exported with `armlm export`'s defaults and loaded back
with transformers' Auto classes, against armlm on real sentences (SST-2 dev, one right-padded batch).

    python bench/export_parity.py                 # 60 steps per run (tiny model), about 3 minutes on 2 cores
    python bench/export_parity.py --steps 200 --sentences 64

Per row: the class the folder loads as, max |delta logit| over real tokens and supported vocabulary (fp32), the
share of rows whose top token agrees, whether the exported tokenizer gives armlm's ids on every sentence, and for
causal LMs greedy generate() against armlm's greedy sampler (3 prompts x 12 tokens), for masked LMs the fill-mask
pipeline's top-5 against armlm's (3 sentences): interchange.parity's comparisons, which the tests assert.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from armlm.common.config import compose_config, data_dir
from armlm.interchange.export import AUTO_CLASSES, armlm_ids, export_checkpoint
from armlm.interchange.parity import armlm_outputs, compare, fill_mask_agreement, generate_agreement
from armlm.interchange.source import read_source
from armlm.training.run import run_pretraining

REPO = Path(__file__).resolve().parents[1]


def tiny_run(out: Path, cache: Path, objective: str, positions: str, steps: int) -> None:
    cfg = compose_config("train", [
            f"objective={objective}", "model=tiny", f"model.positions={positions}", "data.block_size=32",
            "data.batch_size=8", "data.tokenizer.vocab_size=2000", f"trainer.max_steps={steps}",
            f"trainer.val_check_interval={steps}", "trainer.limit_val_batches=2", "trainer.enable_progress_bar=false",
            "max_tokens=null", "trainer.precision=32-true", "logger=[]", f"data.cache_dir={cache}",
            f"output_dir={out}"])
    run_pretraining(cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "export-parity")
    args = parser.parse_args()
    lines = (data_dir() / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:args.sentences + 1]
    sentences = [line.split("\t")[0] for line in lines]
    prompts = [" ".join(text.split()[:3]) for text in sentences[:3]]
    objectives = sorted(p.stem for p in (REPO / "configs" / "objective").glob("*.yaml"))
    rows = []
    print("| objective | positions | loads as | max abs delta logit | rows | same top token | token ids equal | "
          "downstream | GPT-2 fold growth |\n|---|---|---|---|---|---|---|---|---|")
    for objective in objectives:
        for positions in ("learned", "rope"):
            run = args.out / f"{objective}-{positions}"
            if not (run / "checkpoints" / "last.ckpt").is_file():
                tiny_run(run, args.out / "cache", objective, positions, args.steps)
            result = export_checkpoint(run, run.parent / f"{run.name}-hf", overwrite=True)
            folder = result.out
            source = read_source(run)
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
            raw = Tokenizer.from_str(source.tokenizer_json)
            batch = tokenizer(sentences, padding=True, return_tensors="pt")
            ids_equal = sum(tokenizer(s)["input_ids"] == armlm_ids(raw, source, s) for s in sentences)
            auto = AUTO_CLASSES["ArmlmForCausalLM" if result.native else source.architecture]
            hf = auto.from_pretrained(folder, trust_remote_code=True).eval()
            with torch.no_grad():
                theirs = hf(**batch).logits
            ours = armlm_outputs(source, {**batch, "token_type_ids": torch.zeros_like(batch["input_ids"])})
            parity = compare(ours, theirs, batch["attention_mask"], list(getattr(hf.config, "excluded_token_ids", [])))
            if source.is_causal_lm:
                downstream = f"generate {generate_agreement(run, folder, prompts)}/{len(prompts)}"
            else:
                downstream = f"fill-mask top-5 {fill_mask_agreement(run, folder, sentences[:3])}/3"
            row = {"objective": objective, "positions": positions, "target": result.target, "native": result.native,
                   "max_abs_logit_diff": parity.max_abs_logit_diff, "rows": parity.positions,
                   "same_top": parity.same_argmax, "ids_equal": f"{ids_equal}/{len(sentences)}", "downstream": downstream,
                   "fold_growth": result.fold_growth}
            rows.append(row)
            print(f"| {objective} | {positions} | {result.target}{' (native)' if result.native else ''} | "
                  f"{parity.max_abs_logit_diff:.1e} | {parity.positions} | {parity.same_argmax:.0%} | "
                  f"{row['ids_equal']} | {downstream} | "
                  f"{'-' if result.fold_growth is None else format(result.fold_growth, '.1f')} |", flush=True)
    print(json.dumps({"bench": "export_parity", "steps": args.steps, "rows": rows}))


if __name__ == "__main__":
    main()
