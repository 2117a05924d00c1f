"""What a test asserts to show that training learns, not only that it runs: parameters move after an optimiser step,
every trainable gradient is non-zero and finite, a run's loss falls, checkpoints hold finite weights (issue 82: a GPU
run took zero updates for 10,743 steps and every equivalence test still passed)."""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn


def logged_scalars(run_dir: Path, tag: str) -> list[float]:
    """A TensorBoard tag's values in the run folder, in step order."""
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return [event.value for event in events.Scalars(tag)]


def assert_finite_checkpoint(path: Path) -> None:
    state = torch.load(path, weights_only=True)["state_dict"]
    bad = [name for name, t in state.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    assert not bad, f"{path} holds NaN/inf in {bad}"


def assert_checkpoints_all_at(folder: Path, step: int) -> None:
    """`folder` holds checkpoints, every one written at `step` and finite: what a stop at a NaN/inf leaves behind."""
    checkpoints = sorted(folder.glob("*.ckpt"))
    assert checkpoints and all(torch.load(c, weights_only=True)["global_step"] == step for c in checkpoints)
    for path in checkpoints:
        assert_finite_checkpoint(path)


def assert_every_gradient_nonzero(module: nn.Module, reached: set[str] | None = None) -> None:
    """Every trainable parameter (or every one named in `reached`: those a loss reaches at all, where some are
    another part's, like the LM bias of ELECTRA's discriminator) got a finite gradient with some non-zero entry."""
    names = {n for n, p in module.named_parameters() if p.requires_grad} if reached is None else reached
    grads = {n: p.grad for n, p in module.named_parameters() if n in names}
    missing = sorted(n for n, g in grads.items() if g is None)
    zero = sorted(n for n, g in grads.items() if g is not None and not bool(g.abs().sum() > 0))
    nonfinite = sorted(n for n, g in grads.items() if g is not None and not torch.isfinite(g).all())
    assert not (missing or zero or nonfinite), f"no gradient: {missing}; zero: {zero}; NaN/inf: {nonfinite}"


def reached_parameters(module: nn.Module) -> set[str]:
    """The parameters that hold a gradient after a backward pass: those the loss reaches."""
    return {n for n, p in module.named_parameters() if p.grad is not None}


def snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters() if p.requires_grad}


def assert_every_parameter_moved(before: dict[str, torch.Tensor], module: nn.Module) -> None:
    """After an optimiser step, every trainable parameter differs from its `snapshot`."""
    still = [name for name, p in module.named_parameters() if name in before and torch.equal(before[name], p.detach())]
    assert not still, f"unchanged by the optimiser step: {still}"


def write_learnable_corpus(folder: Path, documents: int = 20, words: int = 400) -> list[str]:
    """Text a tiny model learns within tens of steps: a seeded walk over 48 words in which each word has two
    successors, so the next word carries one bit against the unigram's five or so. Returns train.py's data overrides
    that read it (data=text, one document per file, a fifth of them held out)."""
    vocabulary = [f"w{chr(97 + i // 6)}{chr(97 + i % 6)}" for i in range(48)]
    generator = torch.Generator().manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(documents):
        word, text = d % 48, []
        for _ in range(words):
            text.append(vocabulary[word])
            word = (3 * word + 1 + int(torch.randint(2, (1,), generator=generator))) % 48
        (folder / f"{d:02d}.txt").write_text(" ".join(text))
    return ["data=text", f"data.corpus.paths=[{folder}]", "data.corpus.val_fraction=0.2",
            "data.tokenizer.vocab_size=120"]


class LearningProbe(Callback):
    """A run's proof that it trained: at step `at` every trainable gradient is finite and non-zero (read in the
    optimiser hook, before clipping), and at the end every trainable parameter has moved from its value at the start.
    `at` is a step outside any stretch a test keeps free of host reads."""

    def __init__(self, at: int = 1) -> None:
        self.at, self.start, self.checked = at, {}, False

    def on_train_start(self, trainer, pl_module) -> None:
        self.start, self.checked = snapshot(pl_module), False

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == self.at:
            assert_every_gradient_nonzero(pl_module)
            self.checked = True

    def on_train_end(self, trainer, pl_module) -> None:
        assert self.checked, f"the run ended before step {self.at}"
        assert_every_parameter_moved(self.start, pl_module)


class SpoilGradients(Callback):
    """Before the module measures them (callbacks' hooks run first): from step `at` on, one gradient inf (or every
    gradient zero, at=0 with zero=True)."""

    def __init__(self, at: int, zero: bool = False) -> None:
        self.at, self.zero = at, zero

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if trainer.global_step < self.at:
            return
        for p in pl_module.parameters():
            if p.grad is not None:
                p.grad.zero_() if self.zero else p.grad.view(-1)[0].fill_(float("inf"))
                if not self.zero:
                    return


def with_callbacks(monkeypatch, *extra: Callback, stage: str = "armlm.training.run") -> None:
    """A stage's trainer (pretraining's by default; "armlm.finetune.run") with `extra` callbacks after its own."""
    import importlib

    run = importlib.import_module(stage)
    real = run.build_trainer
    monkeypatch.setattr(run, "build_trainer",
                        lambda trainer, out, callbacks, *a, **k: real(trainer, out, [*callbacks, *extra], *a, **k))
