"""Masked diffusion LM (MDLM, Sahoo et al. 2024; Ou et al. 2024): an MLM trained over every mask rate, whose loss
is an upper bound on the negative log-likelihood (../shared/specs/likelihood-bounds.md, section 2)."""

from __future__ import annotations

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import IGNORE_INDEX, Vocabulary
from armlm.models.backbone import Transformer
from armlm.models.rows import flops_rows, take
from armlm.objectives.base import Batch, LossOutput, Objective, mean_or_zero, target_positions
from armlm.objectives.mlm import mask_share


def stratified_rates(batch_size: int, eps: float, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """One mask rate per sequence in (eps, 1]: t_b = eps + (1 - eps) ((u + b / B) mod 1) for one u ~ U(0, 1).
    Each t_b is uniform, so the loss stays unbiased, and the batch covers (eps, 1] evenly, which cuts the
    variance the 1/t weight gives small rates."""
    u = torch.rand((), generator=generator, device=device)
    offsets = torch.arange(batch_size, device=device, dtype=torch.float32) / batch_size
    return eps + (1.0 - eps) * torch.remainder(u + offsets, 1.0)


class MaskedDiffusionLM(Objective):
    """Per sequence one rate t (stratified across the batch, see `stratified_rates`); every target position is
    replaced by [MASK] with probability t, independently; the loss is the NELBO, sum over masked positions of
    their cross-entropy times 1/t, per target position of the batch. [MASK] is never predicted (its logit is
    out of the support), unmasked positions carry no loss (unless `copy_rate` > 0, a training aid outside the
    bound), and the network gets no time input (Ou et al. 2024: the mask count carries it). The vocabulary
    projection and last MLP run only at the positions that carry a loss."""

    pretraining_attention = "bidirectional"
    finetune_attention = "bidirectional"
    scoring = "conditionals"
    masked_conditionals = True
    reference = "Sahoo et al. 2024 (MDLM); Ou et al. 2024"
    mask_in_support = False  # [MASK] is the absorbing state, excluded from the softmax (the loss below)
    # val/loss: the masked positions' mean cross-entropy at rates over (eps, 1]: not MLM's 15 % quantity
    val_loss_kind = "masked_token_any_rate"
    extra_metrics = ("nelbo", "mask_share")  # with copy_rate > 0, train/loss - train/nelbo is the copy loss
    own_loss_metric = "nelbo"  # what it trains (the copy loss aside), per target token
    # val/nelbo is an NLL bound per target token: its exponential is logged as val/ppl_bound.
    perplexity_of = {"nelbo": "ppl_bound"}
    likelihood_metric = "nelbo"  # an upper bound on the NLL per target token

    def __init__(self, eps: float = 1e-3, copy_rate: float = 0.0) -> None:
        super().__init__()
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0.0 < eps < 1.0:
            raise ArmlmError(f"objective.eps={eps!r} must be a number in (0, 1): the smallest mask rate drawn")
        if isinstance(copy_rate, bool) or not isinstance(copy_rate, (int, float)) or not 0.0 <= copy_rate <= 1.0:
            raise ArmlmError(f"objective.copy_rate={copy_rate!r} must be a number in [0, 1]: the share of visible "
                             "targets that also predict their own token (0: MDLM as published)")
        self.eps = float(eps)
        # A training aid outside the bound (docs/results/masked-diffusion.md, "Masked diffusion's plateau"): with [MASK] the only
        # input at every loss position, this backbone sits on its unigram plateau far longer than an MLM with
        # BERT's 10 % kept tokens does. A copy loss at a random share of the visible targets
        # (BERT's kept-token prediction; the visible part of D3PM's auxiliary cross-entropy on x0, Austin et al.
        # 2021, subsampled and unweighted, which MDLM's carry-over unmasking sets to zero) gets it off sooner.
        self.copy_rate = float(copy_rate)
        self.mask_id: int | None = None

    def set_vocabulary(self, vocab: Vocabulary) -> None:
        self.mask_id = vocab.mask_id

    def corrupt(self, batch: Batch, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """(inputs with the masked positions replaced by [MASK], the (B, T) masked positions, the (B,) rates)."""
        if self.mask_id is None:
            raise RuntimeError("MaskedDiffusionLM.set_vocabulary must be called before corrupting inputs")
        input_ids = batch["input_ids"]
        rates = stratified_rates(input_ids.shape[0], self.eps, generator, input_ids.device)
        draws = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
        masked = (draws < rates[:, None]) & target_positions(input_ids, batch.get("attention_mask"))
        return input_ids.masked_fill(masked, self.mask_id), masked, rates

    def copy_positions(self, masked: Tensor, targets: Tensor, generator: torch.Generator | None) -> Tensor | None:
        """(B, T) bool: the visible targets that predict their own token (each with probability copy_rate)."""
        if self.copy_rate == 0.0:
            return None
        draws = torch.rand(masked.shape, generator=generator, device=masked.device)  # after corrupt's draws
        return (draws < self.copy_rate) & targets & ~masked

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        corrupted, masked, rates = self.corrupt(batch, generator)
        targets = target_positions(batch["input_ids"], batch.get("attention_mask"))
        copied = self.copy_positions(masked, targets, generator)
        rows = masked if copied is None else masked | copied
        attention = self.attention(batch)
        states = model(corrupted, attention=attention, attention_mask=batch.get("attention_mask"),
                       token_type_ids=batch.get("token_type_ids"), output_mask=rows)
        weights = take((1.0 / rates)[:, None].expand_as(masked), masked, 0.0)  # each masked row's sequence's 1/t
        # The weighted NLL is the bound; the plain one of the same rows (one pass) feeds val/loss and train/lm_loss.
        masked_rows = take(masked, rows, False)  # which of the rows are masked ones
        masked_states = states if copied is None else take(states, masked_rows)
        input_ids = batch["input_ids"]
        nelbo_sum, nll_sum = model.weighted_lm_nll(masked_states, take(input_ids, masked, IGNORE_INDEX), weights,
                                                   excluded=self.mask_id)
        loss_sum = nelbo_sum
        if copied is not None:  # the copy rows, weight 1: a training aid, kept out of the bound
            copy_sum, _ = model.weighted_lm_nll(take(states, ~masked_rows), take(input_ids, copied, IGNORE_INDEX),
                                                None, excluded=self.mask_id)
            loss_sum = nelbo_sum + copy_sum
        n_masked = masked.sum()
        n_rows = flops_rows(rows)
        flops = model.forward_flops(corrupted, attention, attention_mask=batch.get("attention_mask"),
                                    output_rows=n_rows, vocab_rows=n_rows)
        n_targets = targets.sum()
        inputs = self.input_token_count(batch)
        nelbo = mean_or_zero(nelbo_sum, n_targets)
        return LossOutput(
            loss=mean_or_zero(loss_sum, n_targets),  # the NELBO, plus the copy loss with copy_rate > 0
            lm_nll_sum=nll_sum,
            predicted_tokens=n_masked,
            input_tokens=inputs,
            forward_flops=flops,
            extras={"nelbo": (nelbo.detach(), n_targets), "mask_share": mask_share(n_masked, inputs)},
        )
