"""The per-layer representation diagnostics of one checkpoint, for `armlm evaluate` (representations.*):
the [MASK]-induced shift of unchanged tokens at each rate k (shift: masks anywhere else; shift_left: masks
only left of a cut, tokens read right of it, so causal and bidirectional readers see the same masks;
shift_left_random: random ordinary tokens at those positions instead, the control), and the
embedding geometry (anisotropy raw, centred and standardised; self-similarity of a subword type across
contexts vs across types)."""

from __future__ import annotations

import random
import time
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import SPECIAL_TOKENS
from armlm.diagnostics.representations import embedding_geometry, sentence_shift, sentence_shift_left
from armlm.models.attention import Attention
from armlm.sources.base import Backbone


def representation_report(model: Backbone, sentences: list[list[int]], attention: Attention, mask_id: int | None,
                          cfg: DictConfig, ordinary: Tensor | None = None) -> dict[str, Any]:
    """`representations.sentences` of the held-out `sentences`, drawn with the run's seed; each rate k in
    `representations.mask_rates` replaces k of every sentence's other tokens by [MASK]. `attention`: how the
    checkpoint's backbone attends when diagnosed. `ordinary`: (V,) bool, the ids the random control draws from
    (default armlm's: every id after its special tokens). A model without a mask token (`mask_id` None) gets the
    geometry only: there is no [MASK] to shift it."""
    started = time.perf_counter()
    settings = cfg.representations
    rates = [float(k) for k in settings.mask_rates] if mask_id is not None else []
    if any(not 0 < k < 1 for k in rates):
        raise ArmlmError(f"representations.mask_rates={rates}; every rate must be in (0, 1)")
    count = min(int(settings.sentences), len(sentences))
    if count < 2:
        raise ArmlmError(f"representations need at least 2 sentences, the split has {len(sentences)} that "
                         "qualify; lower sentences.min_tokens or use a larger corpus")
    chosen = [sentences[i] for i in sorted(random.Random(int(cfg.seed)).sample(range(len(sentences)), count))]
    with torch.inference_mode():
        shift = {f"{k:g}": [{"layer": layer, **row} for layer, row in enumerate(
            sentence_shift(model, chosen, attention=attention, mask_id=mask_id, rate=k, seed=int(cfg.seed)), 1)]
            for k in rates}
        left = {f"{k:g}": sentence_shift_left(model, chosen, attention=attention, mask_id=mask_id, rate=k,
                                              seed=int(cfg.seed)) for k in rates}
        # The control: random ordinary tokens at the same positions, corruption every reader has seen in text
        random_ids = (torch.arange(len(SPECIAL_TOKENS), model.config.vocab_size) if ordinary is None
                      else torch.nonzero(ordinary).squeeze(-1))
        random_left = {f"{k:g}": sentence_shift_left(model, chosen, attention=attention, mask_id=mask_id, rate=k,
                                                     seed=int(cfg.seed), random_ids=random_ids) for k in rates}
        geometry = [{"layer": layer, **row} for layer, row in enumerate(
            embedding_geometry(model, chosen, attention=attention, seed=int(cfg.seed)), 1)]
    return {"sentences": count, "tokens": sum(len(ids) - 1 for ids in chosen), "shift": shift,
            "shift_left": {k: [{"layer": layer, **row} for layer, row in enumerate(r.layers, 1)]
                           for k, r in left.items()},
            "shift_left_random": {k: [{"layer": layer, **row} for layer, row in enumerate(r.layers, 1)]
                                  for k, r in random_left.items()},
            "shift_left_read_tokens": {k: r.read_tokens for k, r in left.items()},
            "shift_left_masks_seen": {k: r.masks_seen for k, r in left.items()},
            "geometry": geometry, "seconds": round(time.perf_counter() - started, 2),
            **({} if mask_id is not None else {"shift_skipped": "the tokenizer has no mask token"})}
