"""What every pretraining objective provides: its attention, an input format, heads and a loss, and how its
checkpoints are fine-tuned and scored."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import IGNORE_INDEX, Vocabulary
from armlm.models.attention import CAUSAL, Attention
from armlm.models.backbone import Transformer
from armlm.models.rows import every_row

Batch = dict[str, Tensor]
__all__ = ["IGNORE_INDEX", "NOT_A_LANGUAGE_MODEL", "Batch", "LossOutput", "Objective", "TrainingProgress", "mean_or_zero",
           "refuse_unless_language_model", "summed_token_nll", "target_positions"]


@dataclass(frozen=True)
class TrainingProgress:
    """How far a run has got through its token budget before a training step: what a schedule inside an
    objective (GPT-BERT's mask rate) or a change of objective (phases) is a function of. Both counts are input
    tokens summed over ranks (training.callbacks.TokenAccounting), restored from checkpoints, so a resumed run
    sees the same progress at the same step."""

    tokens_seen: int
    total_tokens: int

    @property
    def fraction(self) -> float:
        return min(1.0, self.tokens_seen / self.total_tokens)


@dataclass
class LossOutput:
    """The loss to optimise plus what the training loop logs under the same tags for every objective."""

    loss: Tensor  # scalar that is back-propagated
    lm_nll_sum: Tensor  # summed NLL (nats) of every token that carried an LM loss, detached
    predicted_tokens: Tensor  # how many tokens carried an LM loss
    input_tokens: Tensor  # non-padding input positions fed to the backbone
    # Matmul FLOPs of the forward pass that gave this loss, backbone and heads (Transformer.forward_flops,
    # models.flops.linear_flops for extra heads): training counts 3x this against a FLOPs budget.
    forward_flops: float
    # Objective-specific metrics as (mean over the batch, number of items it averages).
    extras: dict[str, tuple[Tensor, Tensor | int]] = field(default_factory=dict)


class Objective(nn.Module, ABC):
    """An objective owns its input corruption, any extra heads, and its loss.

    The backbone (and its tied LM head) is passed to `loss`, so an objective never holds a second copy
    of the model and the same backbone can be trained or evaluated under any objective.
    """

    # How the backbone attends in pretraining: a models.attention kind ("causal", "bidirectional", "prefix",
    # "mask"); `attention(batch)` gives the value `loss` runs the backbone with, or, for a pattern drawn per
    # batch (a prefix LM's prefix lengths, XLNet's permutations), `loss` builds it. An objective that mixes
    # kinds across batches (GPT-BERT's causal and masked batches) declares the one most of its batches use.
    pretraining_attention: ClassVar[str]
    # How the backbone attends when this objective's checkpoint is fine-tuned (finetune.attention=pretrained)
    # and diagnosed: "causal" or "bidirectional" (models.attention.STATIC_KINDS).
    finetune_attention: ClassVar[str]
    # How diagnostics score its checkpoints (diagnostics.methods): "chain_rule" (left-to-right factors: exact
    # pair joints and likelihood) or "conditionals" (each token given all the others: the MLM joint
    # constructions and pseudo-likelihood). A new way is written in diagnostics/ and named here. NOT_A_LANGUAGE_MODEL
    # ("none"): its checkpoints give no token distribution to read (ELECTRA's discriminator); zero-shot scoring, the
    # likelihood diagnostics, sampling and LM export refuse them (`refuse_unless_language_model`), and they are
    # fine-tuned only.
    scoring: ClassVar[str]
    # What the DataModule must deliver (datamodules.pretrain.INPUT_FORMATS): packed fixed-length "blocks"
    # or "[CLS] A [SEP] B [SEP]" "segment_pairs".
    input_format: ClassVar[str] = "blocks"
    # Names of the objective-specific entries of `LossOutput.extras`, logged as train/<name>, val/<name>.
    extra_metrics: ClassVar[tuple[str, ...]] = ()
    # Extras that are an NLL per token (nats), with the name their exponential is logged under as val/<name>
    # (masked diffusion: {"nelbo": "ppl_bound"}).
    perplexity_of: ClassVar[dict[str, str]] = {}
    # The validation metric (logged as val/<name>) that is an NLL per target token (`target_positions`: every
    # position after [CLS]), exact or an upper bound, on the same tokens for every objective that has one: AR's
    # val/loss (exact), masked diffusion's val/nelbo (a bound). None: the objective logs no such quantity (an
    # MLM's val/loss averages its selected positions only). Summaries keep it as val_likelihood.
    likelihood_metric: ClassVar[str | None] = None
    # Whether training taught the network to predict [MASK]ed tokens from context on both sides, so its
    # conditionals q(x_i | x with M masked) mean something: what pseudo-log-likelihood and the any-order bound
    # read (zeroshot.scoring). True for MLM, MLM+NSP, masked diffusion and the hybrid's masked rows; false for AR,
    # the prefix LM and the PLM, whose [MASK] input is never (or only as XLNet's query start) trained.
    masked_conditionals: ClassVar[bool]
    # Whether [MASK] is a token its predictions may put mass on. False where training takes [MASK] out of the
    # softmax and never trains its logit down (a PLM, whose [MASK] embedding is the query start vector; masked
    # diffusion, whose absorbing state is never a target): chain-rule scoring and exported models exclude it too.
    mask_in_support: ClassVar[bool] = True
    # What val/loss averages for this objective, so summaries and reports never put two kinds of NLL in one
    # column: it is logged again as val/nll_<val_loss_kind>, and summaries name it.
    val_loss_kind: ClassVar[str]
    # How `next_token_states` reads the backbone, in words another program can rebuild (interchange's exported
    # model, which cannot import armlm): "causal" (the backbone under causal attention) or "query_stream"
    # (XLNet's query stream in the identity order, the [MASK] embedding as its start vector). A test holds each
    # objective's exported left-to-right logits equal to its `next_token_states`.
    left_to_right_reader: ClassVar[str] = "causal"
    # The paper the objective follows, for exported model cards (interchange.card).
    reference: ClassVar[str] = ""
    # Where the token at a masked position i is predicted: from the state at i - offset. 0 for BERT's MLM; 1 for
    # GPT-BERT's masked next-token prediction, whose masked token is read where a causal LM reads its next token.
    # Pseudo-likelihood and the any-order bound read a checkpoint's conditionals there (zeroshot.scoring).
    masked_prediction_offset: ClassVar[int] = 0
    # The validation metric (val/<name>) that is the objective's own held-out loss per target, what the learning
    # gate reads against the unigram NLL of the same targets: val/loss (the LM NLL of whatever the objective
    # predicts) for most; masked diffusion's val/nelbo. A mixture's components are also gated one by one
    # (`target_scopes`, each against its val/loss_<scope>).
    own_loss_metric: ClassVar[str] = "loss"
    # What that loss is read against (`own_baseline`): "unigram" (the unigram NLL of the same targets, in nats per
    # token), or an objective's own context-free baseline (ELECTRA's "binary_entropy" of its replaced share, a loss
    # over labels that is never far below it in nats): a learning check reads the first's margin in nats, the second's
    # as a share of the baseline (bench/objectives_learn.py).
    own_baseline_kind: ClassVar[str] = "unigram"
    # Whether `loss` depends on how far training has got (`set_progress`): such an objective needs a budget whose
    # total is known in advance (train.py refuses a run without one).
    needs_progress: ClassVar[bool] = False
    # The BabyLM 2025 evaluation pipeline's backend that reads this objective's export (armlm export): "causal" (an
    # AutoModelForCausalLM, left to right), "mlm" (an AutoModelForMaskedLM, PLL) or "mntp" (masked next-token); None
    # where none reads it (its card says so).
    babylm_backend: ClassVar[str | None] = None

    @property
    def target_scopes(self) -> tuple[str, ...]:
        """Names under which `loss` scores parts of its targets (Transformer.target_scope), each with its own loss
        logged as val/loss_<name>: a mixture's components. None for most objectives."""
        return ()

    def own_baseline(self, values: dict[str, Tensor]) -> Tensor | None:
        """What the learning gate reads `own_loss_metric` against, from the epoch's validation means (`values`, by
        metric name): None, the unigram NLL of exactly the targets the loss scored through the LM head (the default);
        an objective whose loss is not over tokens gives its own context-free baseline (ELECTRA: the binary entropy
        of its pooled replaced share)."""
        return None

    def attention(self, batch: Batch) -> Attention:
        """The attention `loss` runs the backbone with, for the kinds that need no per-batch draw, restricted to each
        position's document where the batch carries document ids (data.cross_document_attention=false)."""
        return Attention.named(self.pretraining_attention).within(batch.get("document_ids"))

    @classmethod
    def next_token_states(cls, model: Transformer, input_ids: Tensor, mask_id: int) -> Tensor:
        """(B, T, d): row t's state predicts token t + 1, the left-to-right factors that chain-rule scoring
        (diagnostics) and sampling (generation) read. The backbone under causal attention, for AR and every
        objective that trains it that way; XLNet's PLM reads its query stream instead (objectives.plm)."""
        return model(input_ids, attention=CAUSAL)

    def set_vocabulary(self, vocab: Vocabulary) -> None:
        """Receive corpus statistics (special ids, unigram counts) once the tokenizer exists."""

    def set_progress(self, progress: TrainingProgress | None) -> None:
        """Called before every training step with the run's progress, and with None before validation: an
        objective with a schedule then uses its end-of-training setting, so val/loss compares across checkpoints
        of one run. A no-op for objectives without one."""

    @property
    def phase(self) -> str | None:
        """The name of what the objective trains now, where that changes within a run (a phased objective's
        phase); None for objectives that train one thing throughout. The run records where each phase began."""
        return None

    def budget_marks(self, total_tokens: int) -> dict[str, int]:
        """Input-token counts at which the objective changes what it trains (a phased objective's phase starts),
        for the run's summary; none for most objectives."""
        return {}

    @classmethod
    def downstream(cls, config: dict[str, Any]) -> type[Objective]:
        """The class whose attributes say how a checkpoint trained with `config` (this class's config, with its
        `_target_`) is fine-tuned, scored, sampled and exported. The class itself, except for objectives made of
        other objectives (objectives.phased: the last phase's)."""
        return cls

    @abstractmethod
    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        """Compute the loss of one batch; `generator` drives any random corruption reproducibly."""

    @staticmethod
    def input_token_count(batch: Batch) -> Tensor:
        mask = batch.get("attention_mask")
        if mask is None:
            return torch.tensor(batch["input_ids"].numel(), device=batch["input_ids"].device)
        return mask.sum()


NOT_A_LANGUAGE_MODEL = "none"


def refuse_unless_language_model(objective: type[Objective], what: str) -> None:
    """Raise the one-line refusal for `what` (zero-shot scoring, a likelihood, sampling, LM export) of a checkpoint
    whose objective is not a language model (scoring = "none")."""
    if objective.scoring == NOT_A_LANGUAGE_MODEL:
        raise ArmlmError(f"{objective.__name__} checkpoints are not a language model (scoring='none': "
                         f"{objective.reference or 'no token distribution'}), so {what} cannot read them; fine-tune "
                         "them (finetune.py pretrained=...), or use a checkpoint of a language-model objective")


def target_positions(input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """(B, T) bool: the positions AR predicts, every one after the leading [CLS] ([EOD] included), padding never.
    Masked diffusion predicts these too, and the likelihood diagnostics score these for every objective."""
    targets = torch.ones_like(input_ids, dtype=torch.bool)
    targets[:, 0] = False
    return targets if attention_mask is None else targets & attention_mask.bool()


def summed_token_nll(model: Transformer, hidden: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Summed LM cross-entropy (fp32, stable under bf16 autocast) of `targets` at `hidden` (any leading shape,
    one target per state) and the number of non-ignored targets. Eagerly, ignored positions are dropped before the
    vocabulary projection, so padding and unselected MLM positions cost no head FLOPs; a compiled step keeps them,
    and the loss ignores them there (models.rows)."""
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    keep = targets != IGNORE_INDEX
    n_predicted = keep.sum()
    if not every_row() and int(n_predicted) < targets.numel():
        hidden, targets = hidden[keep], targets[keep]
    return model.lm_nll(hidden, targets), n_predicted


def mean_or_zero(total: Tensor, count: Tensor) -> Tensor:
    """total / count, or a zero that keeps the graph when a batch happens to have nothing to predict."""
    return total / count.clamp(min=1)
