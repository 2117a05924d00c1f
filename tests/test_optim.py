"""AdamW as training builds it: fused where torch has the kernel, and the same updates as the plain loop."""

from __future__ import annotations

import torch
from torch import nn

from training.optim import adamw_with_schedule


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
