"""Batched forward passes of a backbone for the diagnostics, and the candidate restriction.

The constructions need thousands of forward passes per pair, all of the same sentence with one or two
tokens swapped, so they run as large batches of equal-length rows (no padding, so SDPA keeps its fast
kernel), and the vocabulary projection is computed only where a probability is read.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from armlm.common.errors import ArmlmError
from armlm.models.attention import BIDIRECTIONAL, CAUSAL, Attention
from armlm.models.backbone import Transformer

# Rows x positions x vocabulary entries held at once when scoring whole sequences (~64 MB of float32).
LOGIT_BUDGET = 16 * 1024 * 1024


class Scorer:
    """Evaluation-mode forward passes of a backbone, chunked into at most `batch_size` rows."""

    def __init__(self, model: Transformer, batch_size: int = 256,
                 next_states: Callable[[Tensor], Tensor] | None = None, excluded: int | None = None) -> None:
        """`next_states(ids)`: (B, T, d) states whose row t predicts token t + 1, the left-to-right factors
        (Objective.next_token_states); default the backbone under causal attention. `excluded`: a token out of
        those factors' support (a PLM's [MASK]: Objective.mask_in_support)."""
        if batch_size < 1:
            raise ArmlmError(f"batch_size={batch_size}; use a positive number of rows per forward pass")
        self.model = model.eval()
        self.batch_size = batch_size
        self.next_states = next_states or (lambda ids: self.model(ids, attention=CAUSAL))
        self.excluded = excluded
        self.device = next(model.parameters()).device
        self.passes = 0  # sequences run through the backbone, for the cost report

    def next_token_log_softmax(self, hidden: Tensor) -> Tensor:
        """log p(next token) at left-to-right states, over the support (`excluded` at -inf)."""
        logits = self.model.logits(hidden).float()
        if self.excluded is not None:
            logits[..., self.excluded] = float("-inf")
        return logits.log_softmax(-1)

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    def _hidden(self, input_ids: Tensor, attention: Attention) -> Tensor:
        self.passes += input_ids.shape[0]
        return self.model(input_ids.to(self.device), attention=attention)

    @torch.no_grad()
    def logits_at(self, input_ids: Tensor, positions: Tensor, candidates: Tensor | None = None, *,
                  attention: Attention = BIDIRECTIONAL) -> Tensor:
        """Logits at `positions[r]` of row r: over the whole vocabulary (R, V), or only for the token ids
        `candidates[r]` (R, K), which is all a K-restricted table needs."""
        out = []
        for start in range(0, input_ids.shape[0], self.batch_size):
            rows = slice(start, start + self.batch_size)
            hidden = self._hidden(input_ids[rows], attention)
            at = hidden[torch.arange(hidden.shape[0], device=self.device), positions[rows].to(self.device)]
            # One position per row: the full projection costs little beside the forward pass, and gathering
            # from it avoids materialising a (rows, K, d) copy of the embedding in the exact mode.
            logits = self.model.logits(at).float()
            if candidates is not None:
                logits = logits.gather(-1, candidates[rows].to(self.device))
            out.append(logits.cpu())
        return torch.cat(out)

    @torch.no_grad()
    def next_token_logits(self, ids: Tensor) -> Tensor:
        """(T, V) log-probabilities (normalised logits) of one sequence: row t over token t + 1, left to right."""
        self.passes += 1
        return self.next_token_log_softmax(self.next_states(ids[None].to(self.device))[0]).cpu()

    @torch.no_grad()
    def scores_and_next(self, input_ids: Tensor, start: int, stop: int) -> tuple[Tensor, Tensor]:
        """One causal pass per row gives both log p(x_t | x_<t) for t = start..stop-1, (R, stop - start), and
        the whole distribution at position stop - 1 over the next token, (R, V) log-probabilities: what the
        AR pair joint needs from each of its K sentences, without running them twice. Left-to-right states
        (`next_states`), not necessarily one causal pass: XLNet's query stream for a PLM."""
        scores, nexts = self._left_to_right_log_probs(input_ids, start, stop, with_next=True)
        return scores, nexts

    @torch.no_grad()
    def next_token_log_probs(self, input_ids: Tensor, start: int = 1, stop: int | None = None) -> Tensor:
        """log p(x_t | x_<t) from the left-to-right states for t = start..stop-1 (stop defaults to T):
        (R, stop - start). The vocabulary projection runs only where a token is predicted, in chunks that
        bound memory."""
        return self._left_to_right_log_probs(input_ids, start, input_ids.shape[1] if stop is None else stop)[0]

    def _left_to_right_log_probs(self, input_ids: Tensor, start: int, stop: int,
                          with_next: bool = False) -> tuple[Tensor, Tensor | None]:
        """The scores of tokens start..stop-1 and, `with_next`, the log-distribution at stop - 1 too."""
        if not 1 <= start < stop <= input_ids.shape[1]:
            raise ArmlmError(f"cannot score tokens {start}..{stop - 1} of a {input_ids.shape[1]}-token row "
                             "(position 0, [CLS], has no left context)")
        width = stop - start + int(with_next)  # positions whose vocabulary projection is needed
        rows_per_chunk = max(1, min(self.batch_size, LOGIT_BUDGET // (self.vocab_size * width)))
        scores, nexts = [], []
        for first in range(0, input_ids.shape[0], rows_per_chunk):
            ids = input_ids[first:first + rows_per_chunk].to(self.device)
            self.passes += ids.shape[0]
            hidden = self.next_states(ids)[:, start - 1:start - 1 + width]
            log_probs = self.next_token_log_softmax(hidden)
            scores.append(log_probs[:, :stop - start].gather(-1, ids[:, start:stop, None]).squeeze(-1).cpu())
            if with_next:
                nexts.append(log_probs[:, -1].cpu())
        return torch.cat(scores), torch.cat(nexts) if with_next else None


def ordinary_tokens(vocab_size: int, special_ids: list[int]) -> Tensor:
    """Boolean (V,) mask of the tokens a position may hold: every id except the special tokens."""
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special_ids] = False
    return ordinary


def choose_candidates(gold: int, unary: Tensor, marginal: Tensor, ordinary: Tensor, k: int | None) -> Tensor:
    """Token ids for one position, the gold token first.

    `k=None` is the exact mode: every ordinary token. Otherwise, as in the paper: the gold token, the best
    of the unary conditional (the other position holding its gold token) up to k/2, and the best of the
    two-masked conditional for the rest. Tokens are never repeated.
    """
    if k is None:
        ids = torch.nonzero(ordinary).squeeze(-1)
        return torch.cat([torch.tensor([gold]), ids[ids != gold]])
    if not 1 <= k <= int(ordinary.sum()):
        raise ArmlmError(f"candidates={k}; choose 1..{int(ordinary.sum())} (the ordinary vocabulary), or null "
                         "for the exact mode")
    taken = ~ordinary.clone()
    taken[gold] = True
    chosen = [gold]
    for scores, quota in ((unary, k // 2), (marginal, k)):
        need = quota - len(chosen)
        if need > 0:
            best = scores.float().masked_fill(taken, float("-inf")).topk(need).indices
            taken[best] = True
            chosen.extend(best.tolist())
    return torch.tensor(chosen)
