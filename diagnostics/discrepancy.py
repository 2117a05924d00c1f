"""The per-layer representation diagnostics of one checkpoint, for `evaluate.py` (representations.*):
the [MASK]-induced shift of unchanged tokens at each rate k, and the embedding geometry (anisotropy raw,
centred and standardised; self-similarity of a subword type across contexts vs across types)."""

from __future__ import annotations

import random
import time
from typing import Any

import torch
from omegaconf import DictConfig

from diagnostics.representations import embedding_geometry, sentence_shift
from models.attention import Attention
from models.backbone import Transformer


def representation_report(model: Transformer, sentences: list[list[int]], attention: Attention, mask_id: int,
                          cfg: DictConfig) -> dict[str, Any]:
    """`representations.sentences` of the held-out `sentences`, drawn with the run's seed; each rate k in
    `representations.mask_rates` replaces k of every sentence's other tokens by [MASK]. `attention`: how the
    checkpoint's backbone attends when diagnosed."""
    started = time.perf_counter()
    settings = cfg.representations
    rates = [float(k) for k in settings.mask_rates]
    if any(not 0 < k < 1 for k in rates):
        raise ValueError(f"representations.mask_rates={rates}; every rate must be in (0, 1)")
    count = min(int(settings.sentences), len(sentences))
    if count < 2:
        raise ValueError(f"representations need at least 2 sentences, the split has {len(sentences)} that "
                         "qualify; lower sentences.min_tokens or use a larger corpus")
    chosen = [sentences[i] for i in sorted(random.Random(int(cfg.seed)).sample(range(len(sentences)), count))]
    with torch.inference_mode():
        shift = {f"{k:g}": [{"layer": layer, **row} for layer, row in enumerate(
            sentence_shift(model, chosen, attention=attention, mask_id=mask_id, rate=k, seed=int(cfg.seed)), 1)]
            for k in rates}
        geometry = [{"layer": layer, **row} for layer, row in enumerate(
            embedding_geometry(model, chosen, attention=attention, seed=int(cfg.seed)), 1)]
    return {"sentences": count, "tokens": sum(len(ids) - 1 for ids in chosen), "shift": shift,
            "geometry": geometry, "seconds": round(time.perf_counter() - started, 2)}
