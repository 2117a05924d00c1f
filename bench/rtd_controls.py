"""Why ELECTRA's discriminator sits at its prior at armlm's CPU scale: three controls, each a train.py run with the
recipe of the pilots (objective=electra, model=small, data=enwiki, the same optimiser, schedule, precision and
clipping), read from their TensorBoard logs.

- `overfit`: the train split cut to one batch (data.max_train_tokens = one batch of blocks), read again every step.
  A detector that can learn at all memorises 32 sequences and finds any replacement in them: its training
  detection loss must fall far below the binary entropy of its labels within a few hundred steps.
- `unigram`: the learned generator swapped for the corpus's unigram distribution (UnigramGeneratorElectra, an
  armlm control, not a published setting): the replacements at BERT's selected positions are unigram noise, an
  easy form of the task. If the detector leaves its prior here but not beside the learned generator, that fits a
  generator whose progress keeps the task hard; if not here either, the recipe does not learn detection at this
  scale. It also removes the generator's masked-LM gradient from the shared token embeddings, so it does not
  separate the samples from that gradient.
- `unigram_trained_generator`: as `unigram`, but the generator trains as ELECTRA's does (its masked-LM loss, its
  gradient into the shared embeddings) and only its samples are discarded. It separates the two: if the detector
  leaves its prior here as under `unigram`, the samples kept the task hard; if not, the shared-embedding gradient
  is implicated. The clean reading needs the columns to split; one seed.

Printed: per validation step, each run's held-out detection loss as a share below its prior (the learning gate's
quantity; 0.08 passes), and the overfit run's training loss against its prior. `--pilot <run folder>` adds an
objective=electra run of the same recipe (the 4x pilot) as a column.

    python bench/rtd_controls.py --root /tmp/rtd-controls --pilot /work/runs/pilots/electra-seed20-x4
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.scalars import run_scalars  # noqa: E402
from armlm.common.vocabulary import Vocabulary  # noqa: E402
from armlm.models.backbone import Transformer  # noqa: E402
from armlm.objectives.base import IGNORE_INDEX, Batch  # noqa: E402
from armlm.objectives.electra import Electra, binary_entropy  # noqa: E402
from armlm.objectives.generator import Replaced  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RECIPE = ["objective=electra", "model=small", "data=enwiki", "trainer.enable_progress_bar=false", "max_flops=null"]


class UnigramGeneratorElectra(Electra):
    """ELECTRA whose replacements are drawn from the corpus's unigram distribution instead of the learned
    generator's softmax; everything else is Electra's. `train_generator=False`: the generator is built, never run
    (its loss is zero); True: it runs and trains as ELECTRA's does, and only its samples are thrown away."""

    def __init__(self, *, train_generator: bool = False, **settings) -> None:
        super().__init__(**settings)
        self.train_generator = train_generator

    def set_vocabulary(self, vocab: Vocabulary) -> None:
        super().set_vocabulary(vocab)
        counts = torch.as_tensor(vocab.unigram_counts, dtype=torch.float)
        self.register_buffer("unigram", counts / counts.sum(), persistent=False)

    def replace(self, batch: Batch, model: Transformer, generator: torch.Generator | None) -> Replaced:
        input_ids = batch["input_ids"]
        if self.train_generator:
            learned = super().replace(batch, model, generator)
        else:
            _, labels = self.masking.corrupt(input_ids, generator)
            selected = labels != IGNORE_INDEX
            zero = torch.zeros((), device=input_ids.device)
            learned = Replaced(input_ids, selected, selected, zero, zero, selected.sum(), 0.0)
        n = int(learned.selected.sum())
        samples = torch.multinomial(self.unigram.to(input_ids.device), max(n, 1), replacement=True,
                                    generator=generator)[:n]
        inputs = input_ids.masked_scatter(learned.selected, samples)
        return learned._replace(inputs=inputs, replaced=inputs != input_ids)


# overfit: 32 blocks of [CLS] + 63 tokens (one batch), 500 steps; the unigram controls: the 4x pilot's 7,034,880 input
# tokens (3,435 steps), so their learning-rate schedule is the pilot's step for step
CONTROLS = {
    "overfit": ["data.max_train_tokens=2016", "max_tokens=1024000", "trainer.val_check_interval=100"],
    "unigram": ["objective._target_=bench.rtd_controls.UnigramGeneratorElectra", "max_tokens=7034880",
                "trainer.val_check_interval=100"],
    "unigram_trained_generator": ["objective._target_=bench.rtd_controls.UnigramGeneratorElectra",
                                  "+objective.train_generator=true", "max_tokens=7034880",
                                  "trainer.val_check_interval=100"],
}


def by_step(series: pd.Series) -> dict[int, float]:
    """A column of a run's scalars (common.scalars.run_scalars) at the steps it has a value."""
    return {int(step): float(value) for step, value in series.dropna().items()}


def share_below(run: Path, loss: str, prior: str) -> dict[int, float]:
    """(prior - loss) / prior at every step both were logged."""
    frame = run_scalars(run)
    return by_step((frame[prior] - frame[loss]) / frame[prior])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="where the control runs are written")
    parser.add_argument("--controls", nargs="+", choices=sorted(CONTROLS), default=sorted(CONTROLS))
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--pilot", type=Path, default=None, help="an objective=electra run of the same recipe")
    parser.add_argument("--overrides", nargs="*", default=[], help="more train.py overrides for every run")
    args = parser.parse_args(argv)
    for control in args.controls:
        run = args.root / control
        if (run / "summary.json").is_file():
            print(f"{control}: {run} has finished; reading it", flush=True)
            continue
        resume = ["ckpt_path=last"] if (run / "checkpoints" / "last.ckpt").is_file() else []
        command = [sys.executable, str(REPO / "train.py"), *RECIPE, *CONTROLS[control], f"seed={args.seed}",
                   f"hydra.run.dir={run}", *args.overrides, *resume]
        print(" ".join(command), flush=True)
        subprocess.run(command, cwd=REPO, check=True)
    columns = {f"{c} (held-out)": share_below(args.root / c, "val/rtd_loss", "val/own_unigram") for c in args.controls}
    if "overfit" in args.controls:
        overfit = run_scalars(args.root / "overfit")
        train, shares = by_step(overfit["train/rtd_loss"]), by_step(overfit["train/replaced_share"])
        entropy = {s: float(binary_entropy(torch.tensor(p))) for s, p in shares.items()}
        below = {s: (entropy[s] - v) / entropy[s] for s, v in train.items() if s in entropy}
        # each validation row gets the last training value logged at or before it
        columns["overfit (training batch)"] = {row: below[max(s for s in below if s <= row)]
                                               for row in columns["overfit (held-out)"] if any(s <= row for s in below)}
    if args.pilot is not None:
        columns[f"electra {args.pilot.name} (held-out)"] = share_below(args.pilot, "val/rtd_loss", "val/own_unigram")
    steps = sorted(set().union(*columns.values()))
    print("detection loss below its prior, as a share of the prior (the gate asks 0.08)")
    print("| step | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for step in steps:
        print(f"| {step} | " + " | ".join(f"{col[step]:.3f}" if step in col else "" for col in columns.values()) + " |")


if __name__ == "__main__":
    main()
