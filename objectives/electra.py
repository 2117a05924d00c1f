"""ELECTRA (Clark et al. 2020) and the ablations of its efficiency analysis (§3.5), on one generator
(objectives.generator). Each differs only in what the backbone learns from the generator-corrupted text:

    Electra(rtd_positions="all")      replaced-token detection at every input position (ELECTRA)
    Electra(rtd_positions="masked")   the same loss at the selected positions only (ELECTRA 15 %)
    ReplaceMLM                        BERT's masked LM, the masked positions filled by samples, not [MASK]
    AllTokensMLM                      the identity of every input token, with the paper's copy mechanism

The total loss is the generator's masked-LM loss plus `discriminator_weight` times the backbone's (lambda = 50 for
replaced-token detection)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from armlm.common.errors import ArmlmError
from armlm.models.backbone import Transformer
from armlm.models.flops import linear_flops
from armlm.models.rows import flops_rows, take
from armlm.objectives.base import IGNORE_INDEX, Batch, LossOutput, mean_or_zero, summed_token_nll, target_positions
from armlm.objectives.generator import GeneratorCorruption, Replaced

RTD_POSITIONS = ("all", "masked")
Extras = dict[str, tuple[Tensor, Tensor | int]]


def binary_entropy(share: Tensor) -> Tensor:
    """Nats of the best context-free guess of a binary label that is 1 at this share of the positions."""
    return -(torch.special.xlogy(share, share) + torch.special.xlogy(1 - share, 1 - share))


class Electra(GeneratorCorruption):
    """The backbone is the discriminator: a dense + GELU + dense(1) head on each state says whether its token was
    replaced; sigmoid cross-entropy averaged over the scored positions (every non-padding one, or the selected)."""

    extra_metrics = ("generator_loss", "rtd_loss", "rtd_accuracy", "replaced_share")
    # val/loss: the generator's masked-token NLL, the only LM loss this objective has
    val_loss_kind = "generator_masked_token"
    # The gate reads the discriminator: its held-out detection loss below the best constant guess of its labels
    own_loss_metric = "rtd_loss"
    own_baseline_kind = "binary_entropy"

    def __init__(self, *, rtd_positions: str = "all", discriminator_weight: float = 50.0, **settings) -> None:
        """`settings`: GeneratorCorruption's (the backbone's shape, generator_fraction, mask_rate, mask_prob)."""
        super().__init__(discriminator_weight=discriminator_weight, **settings)
        if rtd_positions not in RTD_POSITIONS:
            raise ArmlmError(f"objective.rtd_positions={rtd_positions!r}; choose one of {RTD_POSITIONS}")
        self.rtd_positions = rtd_positions
        d_model = settings["d_model"]
        self.rtd_head = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.Linear(d_model, 1))
        for layer in (self.rtd_head[0], self.rtd_head[2]):
            nn.init.normal_(layer.weight, std=settings["init_std"])
            nn.init.zeros_(layer.bias)

    def own_baseline(self, values: dict[str, Tensor]) -> Tensor | None:
        """The binary entropy of the replaced share pooled over the validation positions scored: what a detector
        that ignores its input scores at best."""
        return binary_entropy(values["replaced_share"]) if "replaced_share" in values else None

    def scored(self, batch: Batch, corrupted: Replaced) -> Tensor:
        """(B, T) bool: where the detection loss is read."""
        if self.rtd_positions == "masked":
            return corrupted.selected
        mask = batch.get("attention_mask")
        return torch.ones_like(corrupted.selected) if mask is None else mask.bool()

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        corrupted = self.replace(batch, model, generator)
        scored = self.scored(batch, corrupted)
        states, backbone_flops = self.read_replaced(batch, model, corrupted, scored)
        logits = self.rtd_head(states).squeeze(-1).float()
        labels = take(corrupted.replaced, scored, False).float()
        weights = take(scored, scored, False).float()  # 1 at every scored row (a compiled step keeps others too)
        n = weights.sum()
        per_row = n.clamp(min=1)
        rtd_loss = F.binary_cross_entropy_with_logits(logits, labels, weight=weights, reduction="sum") / per_row
        share = (labels * weights).sum() / per_row
        accuracy = (((logits > 0).float() == labels).float() * weights).sum() / per_row
        flops = corrupted.forward_flops + linear_flops(self.rtd_head, flops_rows(scored)) + backbone_flops
        inputs = self.input_token_count(batch)
        return LossOutput(
            loss=corrupted.generator_loss + self.discriminator_weight * rtd_loss,
            lm_nll_sum=corrupted.generator_nll_sum,
            predicted_tokens=corrupted.n_selected,
            input_tokens=inputs,
            forward_flops=flops,
            extras={"generator_loss": (corrupted.generator_loss.detach(), corrupted.n_selected),
                    "rtd_loss": (rtd_loss.detach(), n),
                    "rtd_accuracy": (accuracy, n), "replaced_share": (share, n)},
        )


class ReplaceMLM(GeneratorCorruption):
    """Replace MLM: BERT's masked LM whose masked positions hold the generator's samples instead of [MASK] (so
    pretraining inputs look like fine-tuning inputs, which have none; the generator may sample [MASK] itself, as
    the reference's may, but never learns to: no target is [MASK]): the backbone predicts the original token at
    each selected position through the tied LM head."""

    extra_metrics = ("generator_loss", "replaced_share")
    val_loss_kind = "replaced_token"  # the selected positions, each holding a sample (sometimes the original)

    def targets(self, batch: Batch, corrupted: Replaced) -> Tensor:
        """(B, T) bool: the positions whose original token the backbone predicts."""
        return corrupted.selected

    def target_nll(self, model: Transformer, states: Tensor, corrupted: Replaced, targets: Tensor,
                   originals: Tensor) -> tuple[Tensor, float, Extras]:
        """(summed NLL of the original tokens at the target rows, the FLOPs of reading them, extra metrics).
        `originals` is IGNORE_INDEX at rows a compiled step keeps that are no target (models.rows)."""
        nll_sum, _ = summed_token_nll(model, states, originals)
        return nll_sum, 2.0 * states.shape[0] * model.config.d_model * model.config.vocab_size, {}

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        corrupted = self.replace(batch, model, generator)
        targets = self.targets(batch, corrupted)
        states, backbone_flops = self.read_replaced(batch, model, corrupted, targets)
        nll_sum, head_flops, extras = self.target_nll(model, states, corrupted, targets,
                                                      take(batch["input_ids"], targets, IGNORE_INDEX))
        n_targets = targets.sum()
        backbone_loss = mean_or_zero(nll_sum, n_targets)
        inputs = self.input_token_count(batch)
        flops = corrupted.forward_flops + head_flops + backbone_flops
        n_selected = corrupted.n_selected
        share = corrupted.replaced.sum() / n_selected.clamp(min=1)
        return LossOutput(
            loss=corrupted.generator_loss + self.discriminator_weight * backbone_loss,
            lm_nll_sum=nll_sum.detach(),
            predicted_tokens=n_targets,
            input_tokens=inputs,
            forward_flops=flops,
            extras={"generator_loss": (corrupted.generator_loss.detach(), n_selected),
                    "replaced_share": (share.float(), n_selected), **extras},
        )


class AllTokensMLM(ReplaceMLM):
    """All-Tokens MLM: as Replace MLM, but the backbone predicts the identity of every input token (each position
    after [CLS], padding never). A sigmoid layer gives each position a copy probability D, and the output
    distribution puts D on the token in the input plus (1 - D) times the LM softmax (the paper's copy mechanism).
    The softmax is read per row here, so its N x V logits exist whole: a cost of this ablation only."""

    extra_metrics = ("generator_loss", "replaced_share", "copy_probability", "selected_loss")
    val_loss_kind = "all_token_copy"  # every target position, under the copy mixture
    # The gate reads the selected positions only, against the unigram NLL of their originals: elsewhere the input
    # holds the answer, and copying it beats unigram without learning anything about language
    own_loss_metric = "selected_loss"

    def __init__(self, **settings) -> None:
        super().__init__(**settings)
        self.copy_head = nn.Linear(settings["d_model"], 1)
        nn.init.normal_(self.copy_head.weight, std=settings["init_std"])
        nn.init.zeros_(self.copy_head.bias)

    def targets(self, batch: Batch, corrupted: Replaced) -> Tensor:
        return target_positions(batch["input_ids"], batch.get("attention_mask"))

    def target_nll(self, model: Transformer, states: Tensor, corrupted: Replaced, targets: Tensor,
                   originals: Tensor) -> tuple[Tensor, float, Extras]:
        scored = originals != IGNORE_INDEX
        weights = scored.float()
        log_probs = torch.log_softmax(model.logits(states).float(), dim=-1)
        log_p = log_probs.gather(1, originals.clamp(min=0)[:, None]).squeeze(1)
        copy_logit = self.copy_head(states).squeeze(-1).float()
        log_d, log_not_d = F.logsigmoid(copy_logit), F.logsigmoid(-copy_logit)
        copies = take(corrupted.inputs, targets, IGNORE_INDEX) == originals
        # log(D + (1 - D) p) where the input holds the target, log((1 - D) p) where it does not
        log_mix = torch.where(copies, torch.logaddexp(log_d, log_not_d + log_p), log_not_d + log_p) * weights
        n_targets = weights.sum()
        copy_probability = (log_d.detach().exp() * weights).sum() / n_targets.clamp(min=1)
        selected = take(corrupted.selected, targets, False)
        # the gate's unigram baseline: the targets its own loss reads
        model.record_targets(originals.masked_fill(~selected, IGNORE_INDEX))
        n_selected = selected.sum()
        selected_loss = -(log_mix.detach() * selected).sum() / n_selected.clamp(min=1)
        vocabulary = 2.0 * states.shape[0] * model.config.d_model * model.config.vocab_size
        return (-log_mix.sum(), vocabulary + linear_flops(self.copy_head, states.shape[0]),
                {"copy_probability": (copy_probability, n_targets), "selected_loss": (selected_loss, n_selected)})
