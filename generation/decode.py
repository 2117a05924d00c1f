"""Generating text from a pretraining checkpoint, the way its objective factorises the distribution (its
class's `scoring`, as the diagnostics choose): left to right for a chain-rule model (AR), iterative unmasking
for one that gives each token's conditional given the others (MLM, masked diffusion)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.generation.sampling import SamplingSettings, sample
from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import Transformer
from armlm.objectives.base import Objective
from armlm.sources.base import Reading, as_reading, causal_next_token_states

UNMASKING_ORDERS = ("confidence", "random")


@dataclass(frozen=True)
class Request:
    prompt: Tensor  # (P,) token ids, [CLS] first
    new_tokens: int
    samples: int
    sampling: SamplingSettings
    banned: Tensor  # ids never generated (special tokens but [EOD])
    eod_id: int
    mask_id: int | None  # None: the tokenizer has none (a decoder), so only left-to-right sampling
    steps: int | None = None  # unmasking steps (None: one position revealed per step)
    order: str = "confidence"  # which masked positions are revealed first


@torch.no_grad()
def left_to_right(model: Transformer, request: Request, generator: torch.Generator,
                  reading: Reading | None = None) -> Tensor:
    """(samples, P + n) ids: each next token drawn given the ones before it, from the left-to-right states the
    model's reading gives (Reading.next_token_states: causal attention, the default, or a PLM's query stream); a row that draws [EOD]
    stops there (the rest of it is [EOD])."""
    device = next(model.parameters()).device
    next_states = causal_next_token_states if reading is None else reading.next_token_states
    ids = request.prompt.to(device).repeat(request.samples, 1)
    done = torch.zeros(request.samples, dtype=torch.bool, device=device)
    for _ in range(request.new_tokens):
        hidden = next_states(model, ids, request.mask_id)[:, -1]
        drawn, _ = sample(model.logits(hidden), request.sampling, generator, request.banned)
        drawn = torch.where(done, torch.full_like(drawn, request.eod_id), drawn)
        ids = torch.cat([ids, drawn[:, None]], dim=1)
        done |= drawn == request.eod_id
        if done.all():
            break
    return ids.cpu()


@torch.no_grad()
def iterative_unmasking(model: Transformer, request: Request, generator: torch.Generator,
                        reading: Reading | None = None) -> Tensor:
    """(samples, P + n) ids: the n positions after the prompt start as [MASK]; each of `steps` steps draws a token
    at every masked position (given everything visible) and keeps ceil(masked / steps left) of them, the most
    probable draws first (`confidence`, MaskGIT / LLaDA) or at random; the rest are masked again. `reading`:
    the samplers' common signature; every model sampled this way reads the same bidirectional conditionals."""
    if request.order not in UNMASKING_ORDERS:
        raise ArmlmError(f"order={request.order!r}; choose one of {UNMASKING_ORDERS}")
    device = next(model.parameters()).device
    n = request.new_tokens
    steps = n if request.steps is None else min(request.steps, n)
    if steps < 1:
        raise ArmlmError(f"steps={request.steps}; use at least 1 (or null: one position per step)")
    tail = torch.full((request.samples, n), request.mask_id, dtype=torch.long)
    ids = torch.cat([request.prompt.repeat(request.samples, 1), tail], dim=1).to(device)
    banned = torch.cat([request.banned, torch.tensor([request.mask_id])]).unique()
    for step in range(steps):
        masked = ids == request.mask_id
        remaining = int(masked[0].sum())  # every row has the same number left
        if remaining == 0:
            break
        keep = math.ceil(remaining / (steps - step))
        states = model(ids, attention=BIDIRECTIONAL, output_mask=masked)  # rows in row-major order of `masked`
        drawn, probability = sample(model.logits(states), request.sampling, generator, banned)
        score = torch.full(masked.shape, -1.0, dtype=torch.float64, device=device)  # visible: never chosen
        if request.order == "confidence":
            score[masked] = probability
        else:
            score[masked] = torch.rand(int(masked.sum()), generator=generator, dtype=torch.float64, device=device)
        chosen = torch.zeros_like(masked)
        chosen.scatter_(1, score.topk(keep, dim=1).indices, True)
        proposal = ids.clone()
        proposal[masked] = drawn
        ids = torch.where(chosen & masked, proposal, ids)
    return ids.cpu()


# Every sampler: (model, request, generator, reading) -> (samples, P + n) ids.
Sampler = Callable[[Transformer, Request, torch.Generator, Reading | None], Tensor]
GENERATORS: dict[str, Sampler] = {
    "chain_rule": left_to_right,
    "conditionals": iterative_unmasking,
}


def generator_for(reading: Reading | type[Objective]) -> Sampler:
    reading = as_reading(reading)
    reading.refuse_unless_language_model("sampling (`armlm generate`)")
    method = GENERATORS.get(reading.scoring)
    if method is None:
        raise ArmlmError(f"{reading.name} declares scoring={reading.scoring!r}, for which "
                         f"armlm has no sampler ({sorted(GENERATORS)}); add one to generation/decode.py")
    return method
