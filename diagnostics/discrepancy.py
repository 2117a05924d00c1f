"""The per-layer representation diagnostics of one checkpoint, for `evaluate.py` (representations.*):
the [MASK]-induced shift of unchanged tokens at each rate k, and the embedding geometry (anisotropy raw,
centred and standardised; self-similarity of a subword type across contexts vs across types)."""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig

from diagnostics.representations import embedding_geometry, sentence_shift

if TYPE_CHECKING:
    from diagnostics.run import Setup


def representation_report(s: Setup, cfg: DictConfig) -> dict[str, Any]:
    """`representations.sentences` held-out sentences drawn with the run's seed; each rate k in
    `representations.mask_rates` replaces k of every sentence's other tokens by [MASK]."""
    started = time.perf_counter()
    settings = cfg.representations
    rates = [float(k) for k in settings.mask_rates]
    if any(not 0 < k < 1 for k in rates):
        raise ValueError(f"representations.mask_rates={rates}; every rate must be in (0, 1)")
    count = min(int(settings.sentences), len(s.sentences))
    if count < 2:
        raise ValueError(f"representations need at least 2 sentences, the split has {len(s.sentences)} that "
                         "qualify; lower sentences.min_tokens or use a larger corpus")
    chosen = [s.sentences[i] for i in sorted(random.Random(int(cfg.seed)).sample(range(len(s.sentences)), count))]
    with torch.inference_mode():
        shift = {f"{k:g}": [{"layer": layer, **row} for layer, row in enumerate(
            sentence_shift(s.model, chosen, attention=s.attention, mask_id=s.mask_id, rate=k, seed=int(cfg.seed)), 1)]
            for k in rates}
        geometry = [{"layer": layer, **row} for layer, row in enumerate(
            embedding_geometry(s.model, chosen, attention=s.attention, seed=int(cfg.seed)), 1)]
    return {"sentences": count, "tokens": sum(len(ids) - 1 for ids in chosen), "shift": shift,
            "geometry": geometry, "seconds": round(time.perf_counter() - started, 2)}
