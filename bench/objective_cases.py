"""One objective from its config with a backbone and a random batch of its input format, without a corpus: what the
benches that step every objective (FLOPs, SDPA calls, compiled steps) run on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from armlm.common.config import CONFIGS, compose_config
from armlm.common.vocabulary import Vocabulary
from armlm.models.backbone import Transformer
from armlm.objectives.base import Batch, Objective
from armlm.training.setup import build, build_model_config

SPECIAL_IDS = 6  # Vocabulary(size, 0..5): pad, unk, cls, sep, mask, eod
CLS_ID = 2


def vocabulary(size: int) -> Vocabulary:
    """A `size`-token vocabulary with armlm's special ids and uniform unigram counts."""
    return Vocabulary(size=size, pad_id=0, unk_id=1, cls_id=CLS_ID, sep_id=3, mask_id=4, eod_id=5,
                      unigram_counts=np.ones(size, dtype=np.int64))


def objective_names() -> list[str]:
    """Every objective config, discovered: a new one is stepped with no edit here."""
    return sorted(path.stem for path in (CONFIGS / "objective").glob("*.yaml"))


@dataclass
class ObjectiveCase:
    objective: Objective
    model: Transformer
    batch: Batch


def objective_case(name: str, *, model: str = "tiny", vocab: int = 300, block: int = 32, batch: int = 4,
                   seed: int = 0, documents: bool = False, overrides: tuple[str, ...] = ()) -> ObjectiveCase | None:
    """configs/objective/<name>.yaml on a model=<model> backbone and one random batch, [CLS] first. `documents`: each
    row holds two documents kept apart (document_ids, as data.cross_document_attention=false gives them); None for
    an objective whose input format joins documents on purpose (segment pairs), which refuses that setting.
    `overrides`: more train.py settings (`+objective.fixed_count=true`)."""
    cfg = compose_config("train", [f"objective={name}", f"model={model}", *overrides])
    torch.manual_seed(seed)  # the objective's own heads (ELECTRA's generator, copy and NSP heads) draw their init too
    objective = build(cfg.objective)
    if documents and objective.input_format != "blocks":
        return None
    objective.set_vocabulary(vocabulary(vocab))
    config = build_model_config(cfg.model)
    config.vocab_size = vocab
    torch.manual_seed(seed)
    network = Transformer(config)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(SPECIAL_IDS, vocab, (batch, block), generator=g)
    ids[:, 0] = CLS_ID
    data: Batch = {"input_ids": ids}
    if objective.input_format != "blocks":  # segment pairs, padded at the end as the data module pads them
        padding = torch.arange(block) >= block - block // 8
        data.update(input_ids=ids.masked_fill(padding, 0), attention_mask=(~padding).long().expand(batch, block).clone(),
                    token_type_ids=torch.zeros_like(ids), nsp_labels=torch.zeros(batch, dtype=torch.long))
    if documents:
        data["document_ids"] = (torch.arange(block) >= block // 2).long().expand(batch, block).clone()
    return ObjectiveCase(objective, network, data)
