"""Generating text from a pretraining checkpoint, the way its objective factorises the distribution (its
class's `scoring`, as the diagnostics choose): left to right for a chain-rule model (AR), iterative unmasking
for one that gives each token's conditional given the others (MLM, masked diffusion)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.rules import Rule, at_least, check_value, one_of
from armlm.generation.sampling import SamplingSettings, sample
from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import Transformer
from armlm.objectives.base import Objective
from armlm.sources.base import Reading, as_reading, causal_next_token_states

UNMASKING_ORDERS = ("confidence", "random")
# what a Request takes, which `armlm generate` checks on its config before it loads a checkpoint
REQUEST_RULES = (
    Rule("new_tokens", (int,), at_least(1), "an integer >= 1"),
    Rule("samples", (int,), at_least(1), "an integer >= 1"),
    Rule("steps", (int,), at_least(1), "an integer >= 1, or null (one position revealed per step)", optional=True),
    Rule("order", (str,), one_of(*UNMASKING_ORDERS), f"one of {UNMASKING_ORDERS}"),
)


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

    def __post_init__(self) -> None:
        for rule in REQUEST_RULES:
            check_value(rule, getattr(self, rule.key))


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
    device = next(model.parameters()).device
    n = request.new_tokens
    steps = n if request.steps is None else min(request.steps, n)
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


# The request's settings that only iterative unmasking reads
UNMASKING_SETTINGS = ("steps", "order")


@dataclass(frozen=True)
class Sampler:
    """A decoder, (model, request, generator, reading) -> (samples, P + n) ids, and which of the request's
    UNMASKING_SETTINGS it reads. Given one it does not read (left to right with steps=4), it refuses: the run's
    samples.json would record a setting that changed nothing."""

    draw: Callable[[Transformer, Request, torch.Generator, Reading | None], Tensor]
    reads: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.draw.__name__

    def refuse_what_it_ignores(self, given: Mapping[str, Any]) -> None:
        """`given`: the request's UNMASKING_SETTINGS by name (a command's settings, before its model is built)."""
        defaults = {name: Request.__dataclass_fields__[name].default for name in UNMASKING_SETTINGS}
        ignored = [f"{name}={given[name]!r}" for name, default in defaults.items()
                   if name not in self.reads and given[name] != default]
        if ignored:
            raise ArmlmError(f"{', '.join(ignored)}: this checkpoint samples {self.name}, which does not read "
                             f"{' or '.join(name for name in UNMASKING_SETTINGS if name not in self.reads)} "
                             f"(iterative unmasking's, for MLM and masked diffusion); drop {'them' if len(ignored) > 1 else 'it'}")

    def what_it_read(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The UNMASKING_SETTINGS as a record should keep them: null for those this sampler does not read."""
        return {name: given[name] if name in self.reads else None for name in UNMASKING_SETTINGS}

    def __call__(self, model: Transformer, request: Request, generator: torch.Generator,
                 reading: Reading | None = None) -> Tensor:
        self.refuse_what_it_ignores({name: getattr(request, name) for name in UNMASKING_SETTINGS})
        return self.draw(model, request, generator, reading)


GENERATORS: dict[str, Sampler] = {
    "chain_rule": Sampler(left_to_right),
    "conditionals": Sampler(iterative_unmasking, reads=UNMASKING_SETTINGS),
}


def generator_for(reading: Reading | type[Objective]) -> Sampler:
    reading = as_reading(reading)
    reading.refuse_unless_language_model("sampling (`armlm generate`)")
    method = GENERATORS.get(reading.scoring)
    if method is None:
        raise ArmlmError(f"{reading.name} declares scoring={reading.scoring!r}, for which "
                         f"armlm has no sampler ({sorted(GENERATORS)}); add one to generation/decode.py")
    return method
