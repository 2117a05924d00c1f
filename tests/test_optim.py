"""AdamW as training builds it: fused where torch has the kernel, and the same updates as the plain loop."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn

from armlm.training.gradients import ClipsUnscaledGradients, fused_adamw_allowed
from armlm.training.optim import adamw_with_schedule


def two_copies() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 16), nn.LayerNorm(16), nn.Linear(16, 50))
    twin = nn.Sequential(nn.Embedding(50, 16), nn.LayerNorm(16), nn.Linear(16, 50))
    twin.load_state_dict(model.state_dict())
    return model, twin


def optimiser(module: nn.Module, fused: bool | None) -> torch.optim.Optimizer:
    return adamw_with_schedule(module, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.98), eps=1e-6, warmup_steps=2,
                               total_steps=10, min_lr_ratio=0.1, fused=fused)["optimizer"]


def test_fused_is_the_default_on_cpu_and_matches_the_per_parameter_loop():
    fast_model, plain_model = two_copies()
    fast, plain = optimiser(fast_model, None), optimiser(plain_model, False)
    assert fast.defaults["fused"] and not plain.defaults["fused"]
    plain.defaults["foreach"] = False
    for group in plain.param_groups:
        group["foreach"] = False  # the reference: one parameter at a time
    ids = torch.randint(0, 50, (8, 5))
    for _ in range(5):
        for model, opt in ((fast_model, fast), (plain_model, plain)):
            loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
    for a, b in zip(fast_model.parameters(), plain_model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert not torch.equal(fast_model[0].weight, two_copies()[0][0].weight)  # the steps did move the weights


class TinyModule(ClipsUnscaledGradients, L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)
        self.norms: list[float] = []
        self.measured: list[float] = []  # train/grad_norm's value: the norm before clipping

    def training_step(self, batch, batch_idx):
        return (self.net(batch[0]) * 100).pow(2).mean()  # gradients far above the clip

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.parameters()]))))

    def on_before_optimizer_step(self, optimizer):
        super().on_before_optimizer_step(optimizer)
        self.measured.append(float(self.grad_norm))

    def configure_optimizers(self):
        return adamw_with_schedule(self, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.98), eps=1e-6, warmup_steps=1,
                                   total_steps=4, min_lr_ratio=1.0, fused=fused_adamw_allowed(self))


def test_bf16_runs_clip_their_gradients_and_keep_fused_adamw(tmp_path):
    """Lightning's bf16 plugin refuses to clip for a fused optimiser; nothing is scaled there, so armlm clips itself."""
    module = TinyModule()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 8)), batch_size=4)
    trainer = L.Trainer(accelerator="cpu", precision="bf16-mixed", gradient_clip_val=0.5, max_steps=3, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp_path))
    trainer.fit(module, data)
    assert trainer.optimizers[0].defaults["fused"] is not False  # None: fused wherever torch has the kernel
    assert getattr(trainer.optimizers[0], "_step_supports_amp_scaling", False)  # the fused kernel it refused before
    # clipped to the limit, not zeroed: a clip that zeroed the gradients (an infinite norm) would also pass "<= 0.5"
    assert len(module.norms) == 3 and all(n == pytest.approx(0.5, rel=1e-3) for n in module.norms)
    assert all(0.5 < m < float("inf") for m in module.measured)  # the pre-clip norms it measured were above the limit
