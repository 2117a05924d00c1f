"""Drawing tokens from logits in float64: temperature, top-k, top-p and Gumbel-max sampling.

Zheng et al. (2024) found that float32 Gumbel noise silently lowers the temperature of masked-diffusion samplers
(-log(-log u) is truncated where u rounds to 1), so the noise, the filtering and the probabilities are float64."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from armlm.common.rules import NUMBER, Rule, at_least, check_value

# what SamplingSettings takes, which `armlm generate` checks on its config before it loads a checkpoint
SAMPLING_RULES = (
    Rule("temperature", NUMBER, at_least(0), "a number >= 0 (0 = greedy)"),
    Rule("top_k", (int,), at_least(0), "an integer >= 0 (0 keeps every token)"),
    Rule("top_p", NUMBER, lambda v: 0 < v <= 1, "a number in (0, 1]"),
)


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 1.0  # 0: greedy (the most probable token)
    top_k: int = 0  # keep the k most probable tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set of most probable tokens whose mass reaches p

    def __post_init__(self) -> None:
        for rule in SAMPLING_RULES:
            check_value(rule, getattr(self, rule.key))


def filtered_log_probs(logits: Tensor, settings: SamplingSettings, banned: Tensor | None = None) -> Tensor:
    """(N, V) float64 log-probabilities after banning `banned` ids, temperature, top-k and top-p."""
    logits = logits.double()
    if banned is not None and len(banned):
        logits = logits.index_fill(-1, banned.to(logits.device), float("-inf"))
    if settings.temperature > 0:
        logits = logits / settings.temperature
    if settings.top_k:
        kth = logits.topk(min(settings.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if settings.top_p < 1:
        ordered, order = logits.sort(dim=-1, descending=True)
        mass_before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)
        drop = mass_before >= settings.top_p  # the first token is always kept
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits.log_softmax(-1)


def sample(logits: Tensor, settings: SamplingSettings, generator: torch.Generator | None,
           banned: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(token ids (N,), their probabilities under the filtered distribution (N,)) from (N, V) logits."""
    log_probs = filtered_log_probs(logits, settings, banned)
    if settings.temperature == 0:
        ids = log_probs.argmax(-1)
    else:
        u = torch.rand(log_probs.shape, generator=generator, dtype=torch.float64, device=log_probs.device)
        gumbel = -torch.log(-torch.log(u.clamp(min=torch.finfo(torch.float64).tiny)))
        ids = (log_probs + gumbel).argmax(-1)
    return ids, log_probs.gather(-1, ids[:, None]).squeeze(1).exp()
