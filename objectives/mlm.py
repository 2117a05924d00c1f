"""Masked LM (BERT): corrupt a share of the positions, predict the originals with bidirectional attention."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import Vocabulary
from armlm.models.backbone import Transformer
from armlm.models.rows import flops_rows, take
from armlm.objectives.base import IGNORE_INDEX, Batch, LossOutput, Objective, mean_or_zero, summed_token_nll

REPLACEMENT_DISTRIBUTIONS = ("unigram", "uniform")


def mask_share(n_masked: Tensor, inputs: Tensor) -> tuple[Tensor, Tensor]:
    """The `mask_share` metric: [MASK] inputs per input token, weighted by the input tokens."""
    return (n_masked / inputs.clamp(min=1)).float(), inputs


class MaskedPass(NamedTuple):
    """One corrupted batch through the backbone and the LM head (MaskedLM.masked_lm)."""

    states: Tensor  # (N, d): the rows at `positions`, in row-major order (models.rows.take)
    positions: Tensor  # (B, T) bool: the selected positions plus any asked for
    nll_sum: Tensor  # summed NLL of the selected positions' original tokens
    n_predicted: Tensor  # how many positions were selected
    # [MASK] inputs: fine-tuning inputs have none (the pretrain-finetune discrepancy the studies measure)
    n_masked: Tensor
    forward_flops: float  # the backbone's and the LM head's (Transformer.forward_flops)


class Corruption(NamedTuple):
    corrupted: Tensor  # (B, T): the inputs as the backbone reads them
    labels: Tensor  # (B, T): the original token at selected positions, IGNORE_INDEX elsewhere
    picked: Tensor  # (B, T) bool: the positions drawn, a special token among them never a target


class MaskedLM(Objective):
    """Select `mask_rate` of the ordinary positions; of those, replace with [MASK] / a random token / keep
    with probabilities `mask_prob / random_prob / keep_prob`. Only selected positions carry a loss, and the
    vocabulary projection is computed only for them (never B x T x V logits).

    `fixed_count`: each sequence predicts exactly round(mask_rate x T) positions (at least one), drawn uniformly
    from its ordinary ones, as BERT's pretraining data does (create_pretraining_data.py's num_to_predict), instead
    of each position drawn independently (RoBERTa's and HF's collator's Bernoulli draw, the default). The count is
    then fixed by the shapes, so a compiled step reads exactly those rows (models.rows) rather than every row."""

    pretraining_attention = "bidirectional"
    finetune_attention = "bidirectional"
    scoring = "conditionals"
    masked_conditionals = True
    reference = "Devlin et al. 2019 (BERT); Liu et al. 2019 (RoBERTa)"
    babylm_backend = "mlm"
    val_loss_kind = "masked_token"  # the selected positions only (mask_rate of the inputs, some left visible)
    extra_metrics = ("mask_share",)

    def __init__(
        self,
        mask_rate: float = 0.15,
        mask_prob: float = 0.8,
        random_prob: float = 0.1,
        keep_prob: float = 0.1,
        replacement: str = "unigram",
        fixed_count: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(fixed_count, bool):
            raise ArmlmError(f"objective.fixed_count={fixed_count!r} must be true or false")
        self.fixed_count = fixed_count
        for name, value in (("mask_rate", mask_rate), ("mask_prob", mask_prob),
                            ("random_prob", random_prob), ("keep_prob", keep_prob)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ArmlmError(f"objective.{name}={value!r} must be a number in [0, 1]")
            if not 0.0 <= float(value) <= 1.0:
                raise ArmlmError(f"objective.{name}={value} is outside [0, 1]; set it to a probability")
        total = mask_prob + random_prob + keep_prob
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ArmlmError(
                f"objective.mask_prob + random_prob + keep_prob = {mask_prob} + {random_prob} + {keep_prob} "
                f"= {total:g}, but they must sum to 1 (e.g. 0.8/0.1/0.1)"
            )
        if replacement not in REPLACEMENT_DISTRIBUTIONS:
            raise ArmlmError(f"objective.replacement={replacement!r}; choose one of {REPLACEMENT_DISTRIBUTIONS}")
        self.mask_rate, self.mask_prob, self.random_prob = mask_rate, mask_prob, random_prob
        self.replacement = replacement
        self.mask_id: int | None = None

    def set_vocabulary(self, vocab: Vocabulary) -> None:
        is_special = torch.zeros(vocab.size, dtype=torch.bool)
        is_special[list(vocab.special_ids)] = True
        if self.replacement == "unigram":
            weights = torch.as_tensor(vocab.unigram_counts, dtype=torch.float64)
        else:
            weights = torch.ones(vocab.size, dtype=torch.float64)
        weights[is_special] = 0.0
        if weights.sum() <= 0:
            raise ArmlmError("the training corpus has no ordinary tokens to draw random replacements from")
        # Derived from the data module on every run, so kept out of checkpoints.
        self.register_buffer("is_special", is_special, persistent=False)
        self.register_buffer("replacement_cdf", (weights.cumsum(0) / weights.sum()).float(), persistent=False)
        self.last_replaceable_id = int(torch.nonzero(weights).max())
        self.mask_id = vocab.mask_id

    def select(self, input_ids: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor | None]:
        """(selected, units): the positions to predict, each independently with probability mask_rate (special
        tokens are dropped afterwards), or `fixed_count`'s per sequence, and no corruption units (each position
        draws its own mask / random / keep). GPT-BERT's span masking overrides this (objectives.masked_next_token):
        `units` (B, T) then gives, per position, the position whose draw decides its corruption (its span's first)."""
        draws = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
        if not self.fixed_count:
            return draws < self.mask_rate, None
        # the `per_sequence` lowest keys, special tokens' keys above every ordinary one (drawn only in a sequence
        # with fewer ordinary tokens, then dropped as targets): exactly that many positions in every row
        keys = draws + self.is_special[input_ids].to(draws.dtype)
        lowest = keys.topk(self.per_sequence(input_ids.shape[1]), dim=1, largest=False).indices
        return torch.zeros_like(draws, dtype=torch.bool).scatter_(1, lowest, True), None

    def per_sequence(self, length: int) -> int:
        """`fixed_count`'s positions per sequence of `length` tokens."""
        return min(length, max(1, round(self.mask_rate * length)))

    def static_rows(self, batch: Batch) -> int | None:
        """How many positions `corruption_of` picks in this batch, where the shapes alone say (`fixed_count`)."""
        ids = batch["input_ids"]
        return ids.shape[0] * self.per_sequence(ids.shape[1]) if self.fixed_count else None

    def corrupt(self, input_ids: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Return (corrupted inputs, labels): labels hold the original token at selected positions and
        IGNORE_INDEX everywhere else. Runs on the inputs' device."""
        return self.corruption_of(input_ids, generator)[:2]

    def corruption_of(self, input_ids: Tensor, generator: torch.Generator | None = None) -> Corruption:
        """`corrupt`'s inputs and labels, and the positions drawn (special ones among them carry no label)."""
        if self.mask_id is None:
            raise RuntimeError("MaskedLM.set_vocabulary must be called before corrupting inputs")
        shape, device = input_ids.shape, input_ids.device
        picked, units = self.select(input_ids, generator)
        selected = picked & ~self.is_special[input_ids]
        action = torch.rand(shape, generator=generator, device=device)
        if units is not None:  # one draw per span: its positions are all masked, all random or all kept
            action = action.gather(1, units)
        to_mask = selected & (action < self.mask_prob)
        to_random = selected & (action >= self.mask_prob) & (action < self.mask_prob + self.random_prob)
        # Inverse-CDF sampling keeps the draw on the device; special tokens have zero mass.
        u = torch.rand(shape, generator=generator, device=device)
        random_ids = torch.searchsorted(self.replacement_cdf, u, right=True).clamp_(max=self.last_replaceable_id)
        corrupted = torch.where(to_mask, torch.full_like(input_ids, self.mask_id), input_ids)
        corrupted = torch.where(to_random, random_ids, corrupted)
        labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        return Corruption(corrupted, labels, picked)

    def masked_lm(self, batch: Batch, model: Transformer, generator: torch.Generator | None,
                  also: Tensor | None = None) -> MaskedPass:
        """Corrupt, encode bidirectionally, score the selected positions. The backbone returns states only at
        the selected positions plus those in `also` ((B, T) bool; MLM+NSP's [CLS]), so neither its last MLP
        nor the vocabulary projection runs anywhere else."""
        corrupted, labels, picked = self.corruption_of(batch["input_ids"], generator)
        selected = labels != IGNORE_INDEX
        # a fixed count reads exactly the positions drawn (a special one among them carries no target)
        count = self.static_rows(batch) if also is None else None
        if also is not None:
            positions = selected | also
        else:
            positions = selected if count is None else picked
        attention = self.attention(batch)
        states = model(
            corrupted,
            attention=attention,
            attention_mask=batch.get("attention_mask"),
            token_type_ids=batch.get("token_type_ids"),
            output_mask=positions,
            output_count=count,
        )
        # the `also` rows carry no target and are dropped
        nll_sum, n_predicted = summed_token_nll(model, states, take(labels, positions, IGNORE_INDEX, count))
        flops = model.forward_flops(corrupted, attention, attention_mask=batch.get("attention_mask"),
                                    output_rows=flops_rows(positions, count),
                                    vocab_rows=flops_rows(selected, count))
        return MaskedPass(states, positions, nll_sum, n_predicted, (corrupted == self.mask_id).sum(), flops)

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        out = self.masked_lm(batch, model, generator)
        inputs = self.input_token_count(batch)
        return LossOutput(
            loss=mean_or_zero(out.nll_sum, out.n_predicted),
            lm_nll_sum=out.nll_sum.detach(),
            predicted_tokens=out.n_predicted,
            input_tokens=inputs,
            forward_flops=out.forward_flops,
            extras={"mask_share": mask_share(out.n_masked, inputs)},
        )
