"""Per-layer diagnostics of a backbone's hidden states: the [MASK] discrepancy and embedding geometry.

- Representation shift: how much the states of unchanged tokens move when k % of the *other* positions
  are replaced by [MASK] (pretraining inputs) versus clean text (fine-tuning inputs): mean cosine
  similarity and linear CKA (Kornblith et al. 2019), per layer. The left-mask variant puts every [MASK]
  before a cut and reads only the tokens after it, so causal and bidirectional readers see the same masks.
- Anisotropy (Ethayarajh 2019): mean cosine similarity of contextual vectors of random token pairs from
  different contexts, raw, after mean-centering and after standardisation per dimension.
- Self-similarity: mean cosine between occurrences of one word type in different contexts, against the
  same for occurrences of different types.

They take token ids and return plain floats; diagnostics/discrepancy.py runs them for `armlm evaluate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.models.attention import Attention
from armlm.models.backbone import Transformer


def linear_cka(x: Tensor, y: Tensor) -> float:
    """Linear CKA of two (n, d) representations of the same n items: ||Yc^T Xc||_F^2 /
    (||Xc^T Xc||_F ||Yc^T Yc||_F), with column-centred Xc, Yc. 1 for identical representations, invariant
    to rotation and isotropic scaling."""
    if x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise ArmlmError(f"CKA needs the same n >= 2 items in both representations, got {x.shape} and {y.shape}")
    x, y = x.double(), y.double()
    xc, yc = x - x.mean(0), y - y.mean(0)
    cross = (yc.T @ xc).pow(2).sum()
    return float(cross / ((xc.T @ xc).norm() * (yc.T @ yc).norm()))


def mask_other_positions(input_ids: Tensor, rate: float, mask_id: int, can_mask: Tensor,
                         generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Replace `rate` of the maskable positions by [MASK]. Returns the corrupted ids and the boolean
    positions left unchanged (those whose states are compared)."""
    if not 0.0 <= rate < 1.0:
        raise ArmlmError(f"mask rate {rate} must be in [0, 1): some tokens must stay unchanged to compare")
    chosen = (torch.rand(input_ids.shape, generator=generator) < rate) & can_mask
    return input_ids.masked_fill(chosen, mask_id), ~chosen


def _device(model: Transformer) -> torch.device:
    return next(model.parameters()).device


def _shift_summary(clean_layers: list[Tensor], shifted_layers: list[Tensor]) -> list[dict[str, float]]:
    """Per layer, (n, d) states of the same unchanged tokens: mean cosine and linear CKA."""
    return [{"cosine": float(torch.cosine_similarity(a, b, dim=-1).mean()), "cka": linear_cka(a, b)}
            for a, b in zip(clean_layers, shifted_layers)]


@torch.no_grad()
def representation_shift(model: Transformer, input_ids: Tensor, *, attention: Attention, mask_id: int, rate: float,
                         can_mask: Tensor, seed: int = 0) -> list[dict[str, float]]:
    """Per layer: mean cosine similarity and linear CKA between the clean and the masked input's states of
    the tokens that were not masked. `input_ids` is (B, T) without padding; `can_mask` marks positions that
    may be masked (not special tokens)."""
    model.eval()
    masked, unchanged = mask_other_positions(input_ids, rate, mask_id, can_mask,
                                             torch.Generator().manual_seed(seed))
    clean_states = model.layer_states(input_ids, attention=attention)
    masked_states = model.layer_states(masked, attention=attention)
    return _shift_summary([s[unchanged] for s in clean_states], [s[unchanged] for s in masked_states])


@torch.no_grad()
def _pooled_shift(model: Transformer, inputs: list[tuple[list[int], Tensor, Tensor]], *,
                  attention: Attention) -> list[dict[str, float]]:
    """The shared pooling of the sentence-level shifts: per (clean ids, corrupted ids (T,), read (T,) bool),
    one forward pass of each input (no padding), the read tokens' states of every sentence pooled per layer
    before the cosine and CKA."""
    model.eval()
    device = _device(model)
    clean_rows: list[list[Tensor]] = [[] for _ in range(model.config.n_layers)]
    shifted_rows: list[list[Tensor]] = [[] for _ in range(model.config.n_layers)]
    for ids, corrupted, read in inputs:
        read = read.view(1, -1).to(device)
        for layer, (a, b) in enumerate(zip(model.layer_states(torch.tensor([ids], device=device), attention=attention),
                                           model.layer_states(corrupted.view(1, -1).to(device), attention=attention))):
            clean_rows[layer].append(a[read].float().cpu())
            shifted_rows[layer].append(b[read].float().cpu())
    return _shift_summary([torch.cat(r) for r in clean_rows], [torch.cat(r) for r in shifted_rows])


@torch.no_grad()
def sentence_shift(model: Transformer, sentences: list[list[int]], *, attention: Attention, mask_id: int, rate: float,
                   skip_first: bool = True, seed: int = 0) -> list[dict[str, float]]:
    """`representation_shift` over sentences of different lengths (one forward pass each, no padding),
    pooling every sentence's unchanged tokens before the per-layer cosine and CKA. The first token
    ([CLS]) is never masked when `skip_first`."""
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for ids in sentences:
        input_ids = torch.tensor([ids])
        can_mask = torch.ones_like(input_ids, dtype=torch.bool)
        can_mask[:, 0] = not skip_first
        masked, unchanged = mask_other_positions(input_ids, rate, mask_id, can_mask, generator)
        inputs.append((ids, masked[0], unchanged[0]))
    return _pooled_shift(model, inputs, attention=attention)


@dataclass(frozen=True)
class LeftMasks:
    """One sentence's draw for the left-mask shift: [MASK] at `masked` (all in 1..cut-1), tokens read at
    positions >= `cut` (all unchanged, all to the right of every mask)."""

    cut: int
    masked: list[int]


def draw_left_masks(sentences: list[list[int]], rate: float, seed: int = 0) -> list[LeftMasks | None]:
    """Per sentence (None for those under 3 tokens, which have no room for [CLS], a mask and a read token):
    a cut c uniform in 2..T-1, and max(1, round(rate * (c - 1))) positions of 1..c-1 drawn without
    replacement. A function of the sentences, the rate and the seed only, never of the model or its
    attention, so every checkpoint and both attentions are scored on the same masks. An exact count rather
    than a coin per position: the masks a read token sees then depend on the cut alone."""
    if not 0.0 < rate < 1.0:
        raise ArmlmError(f"mask rate {rate} must be in (0, 1)")
    generator = torch.Generator().manual_seed(seed)
    draws: list[LeftMasks | None] = []
    for ids in sentences:
        if len(ids) < 3:
            draws.append(None)
            continue
        cut = int(torch.randint(2, len(ids), (1,), generator=generator))
        count = max(1, math.floor(rate * (cut - 1) + 0.5))  # round half up, not Python's half to even
        masked = (1 + torch.randperm(cut - 1, generator=generator)[:count]).sort().values
        draws.append(LeftMasks(cut, masked.tolist()))
    return draws


@dataclass(frozen=True)
class LeftShift:
    layers: list[dict[str, float]]  # per layer: cosine and cka of the read tokens
    read_tokens: int  # tokens pooled (every position >= the cut of every qualifying sentence)
    masks_seen: float  # mean [MASK] count visible to a read token: the same under causal and bidirectional


@torch.no_grad()
def sentence_shift_left(model: Transformer, sentences: list[list[int]], *, attention: Attention, mask_id: int,
                        rate: float, seed: int = 0, random_ids: Tensor | None = None) -> LeftShift:
    """The shift with every [MASK] left of every token read (`draw_left_masks`). A causal reader sees all
    positions before it, so it sees the same masks, as many and at the same positions, as a bidirectional
    one: the comparison of AR and MLM is no longer confounded by how many masks attention lets through
    (in `sentence_shift` a causal token sees only the masks to its left). The bidirectional reader still
    sees the clean tokens to its right, which hold no mask.

    `random_ids` (the control): the same positions get a token drawn uniformly from these ids instead of [MASK],
    so a reader that never saw [MASK] (AR) is moved by corruption it has met in text, not by an untrained input."""
    draws = draw_left_masks(sentences, rate, seed)
    generator = torch.Generator().manual_seed(seed + 1)  # the replacements: after, and apart from, the positions
    inputs, masks_seen = [], 0
    for ids, draw in zip(sentences, draws):
        if draw is None:
            continue
        corrupted = torch.tensor(ids)
        corrupted[draw.masked] = mask_id if random_ids is None else random_ids[torch.randint(
            len(random_ids), (len(draw.masked),), generator=generator)]
        read = torch.arange(len(ids)) >= draw.cut
        inputs.append((ids, corrupted, read))
        masks_seen += len(draw.masked) * (len(ids) - draw.cut)
    if not inputs:
        raise ArmlmError("the left-mask shift needs sentences of 3 tokens or more ([CLS], a masked token, a read "
                         "token); set sentences.min_tokens to 2 or more")
    read_tokens = sum(int(read.sum()) for _, _, read in inputs)
    return LeftShift(_pooled_shift(model, inputs, attention=attention), read_tokens, masks_seen / read_tokens)


def _mean_pair_cosine(vectors: Tensor, first: Tensor, second: Tensor) -> float:
    return float(torch.cosine_similarity(vectors[first], vectors[second], dim=-1).mean())


def anisotropy(states: Tensor, context: Tensor, n_pairs: int = 2000, seed: int = 0) -> dict[str, float]:
    """Mean cosine of random pairs of token vectors from different contexts. `states` is (n, d), the
    vectors of n tokens; `context` (n,) the sentence each came from. Also after subtracting the mean vector
    and after standardising each dimension (z = (x - mu) / sigma over these n vectors)."""
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, len(states), (n_pairs * 2,), generator=g)
    second = torch.randint(0, len(states), (n_pairs * 2,), generator=g)
    keep = context[first] != context[second]
    first, second = first[keep][:n_pairs], second[keep][:n_pairs]
    if len(first) == 0:
        raise ArmlmError("anisotropy needs tokens from at least two different contexts")
    x = states.double()
    centred = x - x.mean(0)
    standardised = centred / x.std(0).clamp_min(1e-12)
    return {name: _mean_pair_cosine(v, first, second)
            for name, v in (("raw", x), ("centred", centred), ("standardised", standardised))}


def self_similarity(states: Tensor, word_type: Tensor, context: Tensor, n_pairs: int = 20_000,
                    seed: int = 0) -> dict[str, float]:
    """Self-similarity as Ethayarajh (2019) defines it: for each word type, the mean cosine over every pair
    of its occurrences in different contexts; then the mean over types ("same_type"), so frequent types
    (",", "the") weigh as much as rare ones and every type with two contexts counts. "different_types" is
    the mean cosine of random occurrences of different types in different contexts (the anisotropy
    baseline the same-type figure is read against); "types" is how many types were averaged.

    Exact over all pairs without listing them: with unit vectors u, the cosines of all pairs of a type sum
    to (|sum u|^2 - sum |u|^2) / 2, and removing the pairs within one context leaves the cross-context sum."""
    unit = torch.nn.functional.normalize(states.double(), dim=-1)
    types, type_index = torch.unique(word_type, return_inverse=True)
    contexts = int(context.max()) + 1
    groups, group_index = torch.unique(type_index * contexts + context, return_inverse=True)
    type_sum = torch.zeros(len(types), unit.shape[1], dtype=unit.dtype).index_add_(0, type_index, unit)
    group_sum = torch.zeros(len(groups), unit.shape[1], dtype=unit.dtype).index_add_(0, group_index, unit)
    type_count = torch.bincount(type_index, minlength=len(types)).double()
    group_count = torch.bincount(group_index, minlength=len(groups)).double()
    group_type = groups // contexts
    within_sq = torch.zeros(len(types), dtype=unit.dtype).index_add_(0, group_type, group_sum.pow(2).sum(-1))
    within_pairs = torch.zeros(len(types), dtype=unit.dtype).index_add_(0, group_type, group_count.pow(2))
    cross_pairs = (type_count.pow(2) - within_pairs) / 2
    cross_sum = (type_sum.pow(2).sum(-1) - within_sq) / 2
    counted = cross_pairs > 0
    if not counted.any():
        raise ArmlmError("self-similarity needs a word type that occurs in two different contexts")
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, len(states), (n_pairs,), generator=g)
    second = torch.randint(0, len(states), (n_pairs,), generator=g)
    different = (context[first] != context[second]) & (word_type[first] != word_type[second])
    return {"same_type": float((cross_sum[counted] / cross_pairs[counted]).mean()),
            "different_types": _mean_pair_cosine(states.double(), first[different], second[different]),
            "types": float(counted.sum())}


@torch.no_grad()
def embedding_geometry(model: Transformer, sentences: list[list[int]], *, attention: Attention, seed: int = 0,
                       skip_first: bool = True) -> list[dict[str, float]]:
    """Per layer: anisotropy (raw, centred, standardised) and self-similarity of subword types, over the
    tokens of `sentences` (each its own context; `[CLS]` skipped when `skip_first`)."""
    model.eval()
    per_layer: list[list[Tensor]] = [[] for _ in range(model.config.n_layers)]
    types, contexts = [], []
    for index, ids in enumerate(sentences):
        states = model.layer_states(torch.tensor([ids], device=_device(model)), attention=attention)
        start = 1 if skip_first else 0
        for layer, s in enumerate(states):
            per_layer[layer].append(s[0, start:].cpu())
        types.append(torch.tensor(ids[start:]))
        contexts.append(torch.full((len(ids) - start,), index))
    word_type, context = torch.cat(types), torch.cat(contexts)
    out = []
    for vectors in per_layer:
        x = torch.cat(vectors)
        similarity = self_similarity(x, word_type, context, seed=seed)
        similarity.pop("types")  # the same for every layer: a property of the sentences, not of the model
        out.append({**{f"anisotropy_{k}": v for k, v in anisotropy(x, context, seed=seed).items()},
                    **{f"self_similarity_{k}": v for k, v in similarity.items()}})
    return out
