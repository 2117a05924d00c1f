"""GPT-BERT (Charpentier & Samuel 2024) as published: every step mixes masked next-token rows
(objectives.masked_next_token) and causal LM rows (objectives.ar), 15 : 1 by default, one head for both
(ltgoslo/gpt-bert: train_*.py `--hybrid_numerator 15 --hybrid_denominator 16`; model_extra.py `Bert.forward`,
`loss = ratio * masked_loss + (1 - ratio) * causal_loss`)."""

from __future__ import annotations

from typing import Any

from armlm.common.errors import ArmlmError
from armlm.objectives.mixture import RowMixture


class HybridLM(RowMixture):
    """A RowMixture whose checkpoints are read as GPT-BERT's are: fine-tuned bidirectionally (most rows attend both
    ways), scored by the chain rule under causal attention (its causal rows train a left-to-right LM), and by
    pseudo-likelihood and the any-order bound at the position before a masked token (its masked rows'
    conditionals). Whichever components the config mixes, these are the class's answers: the config must keep
    one masked next-token component and one causal one (configs/objective/hybrid.yaml)."""

    pretraining_attention = "bidirectional"  # the masked rows': most of them
    finetune_attention = "bidirectional"
    scoring = "chain_rule"
    masked_conditionals = True
    masked_prediction_offset = 1
    reference = "Charpentier and Samuel 2024 (GPT-BERT)"
    # GPT-BERT's own reading in the 2025 pipeline: mntp loads the export's AutoModelForMaskedLM (bidirectional) and
    # reads each masked token one position back, as armlm's PLL does here; its causal backend reads the chain rule
    # (armlm's exact). Both equal armlm pair for pair (bench/babylm_pipeline.py, docs/guides/babylm.md)
    babylm_backend = "mntp"
    val_loss_kind = "mixed_next_token"

    def __init__(self, components: dict[str, Any]) -> None:
        super().__init__(components)
        offsets = {name: part.masked_prediction_offset for name, part in self.parts.items()
                   if part.masked_conditionals}
        if set(offsets.values()) != {1} or not any(part.scoring == "chain_rule" for part in self.parts.values()):
            raise ArmlmError("objective=hybrid mixes a masked next-token component (masked_prediction_offset 1) with a "
                             f"causal one; got {dict((n, type(p).__name__) for n, p in self.parts.items())}")
        self.val_loss_kind = type(self).val_loss_kind

    @classmethod
    def representative(cls, config: dict[str, Any]) -> None:
        return None
