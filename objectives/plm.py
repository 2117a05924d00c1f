"""XLNet's permutation LM (Yang et al. 2019) with two-stream attention on the shared backbone, segment recurrence
left out.

Per row, 1/K of the positions after [CLS] are predicted (partial prediction, XLNet's K = 6), chosen as XLNet's
released code chooses them: n-gram spans (`targets=spans`), or a uniformly random set (`targets=tokens`). The
predicted positions come in a random order after every other position; as in XLNet's released `_local_perm`, the
positions not predicted ([CLS] with them) share the first place, so they see each other and never a target
(`non_targets=bidirectional`), or keep strict places of their own in the random order (`non_targets=ordered`,
the paper's description and armlm's earlier default). The content stream is the ordinary backbone run: position i
attends to the content of positions up to and including itself in the order. The query stream has a row per predicted position z: its input is a learned start vector w at z's
position, and it attends to the content of the positions before z in the order, never to z's own token.
Both streams run in one backbone call: the query rows are appended to the block with their positions given
per row (`position_ids`) and an explicit mask; no row attends to a query row, so the content stream is exactly
what it would be alone, and the layer-by-layer keys and values the query rows read are the content stream's.
Only the predicted positions get a query row, so the extra cost is about T/K rows. The start vector w is the [MASK] token's embedding: PLM never
puts [MASK] in its inputs or predicts it, so that row of the tied embedding is free, and checkpoints need no
parameter beyond the backbone's. Fine-tuning runs the content stream with bidirectional attention, as XLNet
does; the chain-rule scores and sampling use the query stream in the identity order (`next_token_states`).
That order is a valid factorisation, but with K > 1 training never predicts a token from fewer than about
(1 - 1/K) of its row: the identity order's first factors condition on less context than any trained one, so a
PLM's exact NLL and AR pair joints measure it partly outside what it learned (K = 1 removes that)."""

from __future__ import annotations

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import IGNORE_INDEX, Vocabulary
from armlm.models.attention import Attention
from armlm.models.backbone import Transformer
from armlm.models.rows import every_row, flops_rows, take
from armlm.objectives.base import Batch, LossOutput, Objective, mean_or_zero, target_positions

TARGET_CHOICES = ("spans", "tokens")
NON_TARGET_CHOICES = ("bidirectional", "ordered")


class TwoStreamInputs:
    """One backbone call's worth of both streams for a batch in given orders."""

    def __init__(self, input_ids: Tensor, ranks: Tensor, predicted: Tensor, start_id: int,
                 documents: Tensor | None = None, most_predicted: int | None = None) -> None:
        """`ranks` (B, T): each position's place in its row's order; `predicted` (B, T) bool: the positions that
        get a query row; `documents` (B, T): each position's document id, to attend within (None: across).
        `most_predicted`: a bound on any row's predicted count, known from the shapes, which a compiled step takes as
        its number of query slots (eagerly the batch's own largest count; None: every position)."""
        b, t = input_ids.shape
        device = input_ids.device
        counts = predicted.sum(1)
        if every_row():
            self.slots = t if most_predicted is None else min(most_predicted, t)
        else:
            self.slots = int(counts.max()) if b else 0
        positions = torch.arange(t, device=device)
        # Query slot k of a row holds its k-th predicted position (ascending); slots past its count are idle.
        sort_key = torch.where(predicted, positions, positions + t)
        self.query_positions = sort_key.argsort(dim=1)[:, :self.slots]
        self.valid = torch.arange(self.slots, device=device)[None] < counts[:, None]  # (B, P)
        # (B, T + P): the token each row's query state predicts, IGNORE_INDEX at content rows and idle slots
        self.targets = torch.cat([torch.full_like(input_ids, IGNORE_INDEX),
                                  input_ids.gather(1, self.query_positions).masked_fill(~self.valid, IGNORE_INDEX)], 1)
        query_ranks = ranks.gather(1, self.query_positions)  # (B, P)
        content = ranks[:, None, :] <= ranks[:, :, None]  # (B, T, T): key s at or before query t in the order
        query = ranks[:, None, :] < query_ranks[:, :, None]  # (B, P, T): keys strictly before z
        allowed = torch.zeros(b, t + self.slots, t + self.slots, dtype=torch.bool, device=device)
        allowed[:, :t, :t] = content
        allowed[:, t:, :t] = query
        self.input_ids = torch.cat([input_ids, input_ids.new_full((b, self.slots), start_id)], dim=1)
        self.position_ids = torch.cat([positions.expand(b, t), self.query_positions], dim=1)
        # a query row stands at its position, so it belongs to that position's document
        self.attention = Attention.explicit(allowed).within(
            None if documents is None else documents.gather(1, self.position_ids))
        self.output_mask = torch.cat([torch.zeros_like(predicted), self.valid], dim=1)

    def run(self, model: Transformer) -> Tensor:
        """The query stream's last states at the valid slots, (N, d) in row-major order (as `row_targets`)."""
        return model(self.input_ids, attention=self.attention, position_ids=self.position_ids,
                     output_mask=self.output_mask)

    def row_targets(self) -> Tensor:
        """The targets of `run`'s rows."""
        return take(self.targets, self.output_mask, IGNORE_INDEX)

    def forward_flops(self, model: Transformer) -> float:
        n = flops_rows(self.output_mask)
        return model.forward_flops(self.input_ids, self.attention, output_rows=n, vocab_rows=n)


class PermutationLM(Objective):
    pretraining_attention = "mask"
    finetune_attention = "bidirectional"
    scoring = "chain_rule"  # the identity order's query stream: an exact left-to-right factorisation
    masked_conditionals = False
    reference = "Yang et al. 2019 (XLNet)"
    val_loss_kind = "permuted_last_share"  # the last 1/K of random orders: not AR's every-token quantity
    extra_metrics = ("predicted_share",)
    mask_in_support = False  # [MASK] is the query start vector, out of the softmax in training
    left_to_right_reader = "query_stream"

    def __init__(self, partial_k: int = 6, targets: str = "spans", non_targets: str = "bidirectional",
                 max_span: int = 5, span_context: int = 6) -> None:
        super().__init__()
        if isinstance(partial_k, bool) or not isinstance(partial_k, int) or partial_k < 1:
            raise ArmlmError(f"objective.partial_k={partial_k!r} must be an integer >= 1: 1/K of each row's tokens is "
                             "predicted (XLNet: 6 or 7; 1 predicts every token)")
        if targets not in TARGET_CHOICES:
            raise ArmlmError(f"objective.targets={targets!r}; choose one of {TARGET_CHOICES}")
        if non_targets not in NON_TARGET_CHOICES:
            raise ArmlmError(f"objective.non_targets={non_targets!r}; choose one of {NON_TARGET_CHOICES}")
        for name, value in (("max_span", max_span), ("span_context", span_context)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArmlmError(f"objective.{name}={value!r} must be a positive integer")
        self.partial_k, self.targets, self.non_targets = partial_k, targets, non_targets
        self.max_span, self.span_context = max_span, span_context
        self.start_id: int | None = None

    def set_vocabulary(self, vocab: Vocabulary) -> None:
        self.start_id = vocab.mask_id

    def target_count(self, batch: Batch) -> Tensor:
        """(B, 1): round(n / K) of each row's n targets, at least one."""
        n = target_positions(batch["input_ids"], batch.get("attention_mask")).sum(1, keepdim=True)
        return torch.clamp(torch.floor(n / self.partial_k + 0.5), min=1).long()

    def most_predicted(self, length: int) -> int:
        """`target_count`'s largest value for `length`-position rows (length - 1 targets), from the shape alone."""
        return max(1, int((length - 1) / self.partial_k + 0.5))

    def ranks(self, batch: Batch, generator: torch.Generator | None = None, after: Tensor | None = None) -> Tensor:
        """(B, T) each position's place in a uniformly random order of the row's targets, [CLS] first (rank 0)
        and padding after every real token; with `after` ((B, T) bool), those positions after all the others."""
        input_ids = batch["input_ids"]
        targets = target_positions(input_ids, batch.get("attention_mask"))
        keys = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
        if after is not None:
            keys = keys + after
        keys = torch.where(targets, keys, torch.full_like(keys, 3.0))
        keys[:, 0] = -1.0
        return keys.argsort(dim=1).argsort(dim=1)

    def predicted(self, batch: Batch, ranks: Tensor) -> Tensor:
        """(B, T) bool: the last round(n / K) of each row's n targets in its order (at least one)."""
        n = target_positions(batch["input_ids"], batch.get("attention_mask")).sum(1, keepdim=True)
        return (ranks > n - self.target_count(batch)) & (ranks <= n)  # targets hold ranks 1..n

    def span_targets(self, batch: Batch, generator: torch.Generator | None = None) -> Tensor:
        """(B, T) bool: XLNet's `_sample_mask` (data_utils.py), every row at once: from the row's start, draw an
        n-gram length n in 1..max_span with p(n) ~ 1/n, a context of n x span_context positions (mask_alpha / mask_beta
        = 6) split at random around it, and predict the n positions inside, until round(n / K) are chosen or the
        row ends; then single random positions make up the count. Spans start at any token (XLNet aligns them to
        SentencePiece word starts, which an objective that never sees the tokenizer cannot)."""
        input_ids = batch["input_ids"]
        device, (rows, length) = input_ids.device, input_ids.shape
        targets = target_positions(input_ids, batch.get("attention_mask"))
        goal = self.target_count(batch).squeeze(1)
        last = targets.long().cumsum(1).argmax(1)  # each row's last target position
        grams = torch.arange(1, self.max_span + 1, device=device)
        weights = (1.0 / grams).expand(rows, -1)
        positions = torch.arange(length, device=device)
        chosen = torch.zeros_like(targets)
        count = torch.zeros(rows, dtype=torch.long, device=device)
        cursor = torch.ones(rows, dtype=torch.long, device=device)  # position 0 is [CLS]
        active = torch.ones(rows, dtype=torch.bool, device=device)
        # Every round a span is placed in each active row (n >= 1 positions, up to its goal) or the row stops, so
        # goal rounds place them all. The rounds' draws are made at once, so a compiled step, which runs them all,
        # and an eager one, which stops when every row has, draw the same.
        rounds = self.most_predicted(length)
        gram_draws = torch.multinomial(weights, rounds, replacement=True, generator=generator)  # (B, rounds)
        left_draws = torch.rand(rows, rounds, generator=generator, device=device)
        for step in range(rounds):
            if not every_row() and not bool(active.any()):
                break
            n = grams[gram_draws[:, step]].minimum(goal - count)
            context = n * self.span_context
            left = (left_draws[:, step] * context).long()
            begin, end = cursor + left, cursor + left + n
            fits = active & (count < goal) & (end <= last + 1)
            chosen |= fits[:, None] & (positions >= begin[:, None]) & (positions < end[:, None])
            count += torch.where(fits, n, 0)
            cursor, active = end + context - left, fits
        keys = torch.rand(input_ids.shape, generator=generator, device=device).masked_fill(chosen | ~targets, 2.0)
        return chosen | (keys.argsort(1).argsort(1) < (goal - count)[:, None])

    def orders(self, batch: Batch, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """(ranks, predicted) for a batch. targets=tokens: the last 1/K of a uniformly random order (a uniformly
        random set); spans: `span_targets`, ordered at random after every other position. non_targets=bidirectional
        (XLNet's released `_local_perm`): every position that is not predicted, [CLS] with them, shares rank 0, so
        they see each other and no target; ordered: they keep their places in the random order."""
        if self.targets == "tokens":
            ranks = self.ranks(batch, generator)
            predicted = self.predicted(batch, ranks)
        else:
            predicted = self.span_targets(batch, generator)
            ranks = self.ranks(batch, generator, after=predicted)
        if self.non_targets == "bidirectional":
            real = target_positions(batch["input_ids"], batch.get("attention_mask"))
            real[:, 0] = True
            ranks = torch.where(predicted | ~real, ranks, torch.zeros_like(ranks))
        return ranks, predicted

    def loss(self, batch: Batch, model: Transformer, generator: torch.Generator | None = None) -> LossOutput:
        if self.start_id is None:
            raise RuntimeError("PermutationLM.set_vocabulary must be called before its loss")
        if batch.get("token_type_ids") is not None and not every_row() and bool(batch["token_type_ids"].any()):
            raise ArmlmError("objective=plm takes packed blocks without segment types (input_format=blocks)")
        ranks, predicted = self.orders(batch, generator)
        streams = TwoStreamInputs(batch["input_ids"], ranks, predicted, self.start_id, batch.get("document_ids"),
                                  self.most_predicted(batch["input_ids"].shape[1]))
        states = streams.run(model)
        nll_sum = model.lm_nll(states, streams.row_targets(), excluded=self.start_id)
        n_predicted = streams.valid.sum()
        inputs = self.input_token_count(batch)
        return LossOutput(
            loss=mean_or_zero(nll_sum, n_predicted),
            lm_nll_sum=nll_sum.detach(),
            predicted_tokens=n_predicted,
            input_tokens=inputs,
            forward_flops=streams.forward_flops(model),
            extras={"predicted_share": (n_predicted / inputs.clamp(min=1), batch["input_ids"].shape[0])},
        )

    @staticmethod
    def identity_order(input_ids: Tensor) -> Tensor:
        return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)

    @classmethod
    def next_token_states(cls, model: Transformer, input_ids: Tensor, mask_id: int) -> Tensor:
        """(B, T, d): row t holds the query stream of position t + 1 in the identity order, which sees the content
        of positions 0..t: log p(x_{t+1} | x_<=t), the chain-rule factor AR reads at t. The last row needs
        position T, so inputs must be shorter than model.max_len."""
        b, t = input_ids.shape
        if t >= model.config.max_len:
            raise ArmlmError(f"a PLM's left-to-right scores of a {t}-token input query position {t}; "
                             f"model.max_len={model.config.max_len}: give inputs of at most {model.config.max_len - 1}")
        padded = torch.cat([input_ids, input_ids.new_full((b, 1), mask_id)], dim=1)  # position T exists
        ranks = cls.identity_order(padded)
        predicted = ranks >= 1
        states = TwoStreamInputs(padded, ranks, predicted, mask_id).run(model)
        return states.view(b, t, -1)

