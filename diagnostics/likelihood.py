"""Likelihood on held-out blocks, comparable across objectives (../shared/specs/likelihood-bounds.md): an AR
checkpoint's exact NLL, and for a bidirectional one the any-order bound

    B(x) = sum_{m=1..L} E_{|M| = m} [ (1/m) sum_{i in M} -log q(x_i | x_{-M}) ],

an upper bound on the NLL of a proper model built from its conditionals (a uniform mixture of AR models, one
per order). Both are taken over the same target positions of the same blocks: every position after the leading
[CLS], [EOD] included, so a model is never told where a document ends when AR is not.

The bound is estimated in its discrete form, stratified over the masked-set size m: the continuous form's 1/t
weight has unbounded variance near t = 0, while each term of the discrete form is a mean of NLLs."""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor
from tqdm import tqdm

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import CLS, EOD, MASK, PAD, SEP, smoothed_unigram_nll
from armlm.datamodules.corpora import Corpus
from armlm.datamodules.encoding import token_id
from armlm.datamodules.tokenizer import encode_documents
from armlm.diagnostics.scoring import LOGIT_BUDGET
from armlm.models.attention import BIDIRECTIONAL, CAUSAL
from armlm.models.backbone import Transformer
from armlm.objectives.base import target_positions

log = logging.getLogger("armlm.diagnostics")
# (blocks (N, T), masked (N, T) bool) -> (N, T) float64: -log q(x_i | x with the masked positions as [MASK])
# at every masked position, 0 elsewhere.
MaskedScorer = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class LikelihoodResult:
    kind: str  # "exact" (AR's chain rule) or "upper_bound" (the any-order bound of a bidirectional model)
    nll_per_token: float
    blocks: int
    target_tokens: int
    # The same over the targets that are not [EOD] (every position still in the context): an MLM never learns to
    # predict [EOD] (it selects only ordinary tokens), so the full figure carries that on top of the objective.
    nll_per_token_without_eod: float
    eod_targets: int
    blocks_stderr: float  # standard error over blocks: how much another sample of blocks would move it
    mc_stderr: float = 0.0  # Monte-Carlo standard error of nll_per_token on these blocks (0 when exact)
    strata: int = 0
    draws: int = 0  # replicates per block, each with one masked set per stratum
    target_met: bool = True  # the Monte-Carlo standard error reached the asked share of the value

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll_per_token)

    def summary(self) -> dict[str, float | int | str]:
        return {**asdict(self), "ppl": self.perplexity,
                "rel_mc_stderr": self.mc_stderr / self.nll_per_token if self.nll_per_token else 0.0}


def held_out_blocks(corpus: Corpus, tokenizer: Tokenizer, *, block_size: int, count: int,
                    split: str = "validation", start: int | None = None, document_end: int | None = None) -> Tensor:
    """`count` blocks `[CLS] + block_size - 1 tokens` of the split's document stream ([EOD] after each document),
    as the pretraining DataModule packs them, spread evenly over the split. `start` and `document_end`: another
    tokenizer's ids in those roles (a Hugging Face model's BOS or [CLS], its EOS or [SEP]: sources.SpecialTokens)."""
    documents = corpus.load().get(split)
    if documents is None:
        raise ArmlmError(f"split={split!r}; the corpus has 'train' and 'validation'")
    tokens, _ = encode_documents(tokenizer, documents, desc=f"{split} blocks", eod=document_end)
    span = block_size - 1
    available = len(tokens) // span
    if available < 1 or count < 1:
        raise ArmlmError(f"likelihood.blocks={count}: the {split} split of {corpus.describe()} makes {available} "
                         f"blocks of {block_size} tokens; lower likelihood.blocks or likelihood.block_size")
    chosen = np.unique(np.linspace(0, available - 1, num=min(count, available)).round().astype(np.int64))
    rows = np.stack([tokens[i * span:(i + 1) * span] for i in chosen]).astype(np.int64)
    cls = np.full((len(rows), 1), token_id(tokenizer, CLS) if start is None else start, dtype=np.int64)
    return torch.from_numpy(np.concatenate([cls, rows], axis=1))


# The special tokens outside the support of the unigram the likelihood section compares with: [EOD] because its
# targets are left out of that comparison (unigram_nll_without_eod), the others because they are never targets.
# [UNK] stays in.
UNIGRAM_EXCLUDED = (PAD, CLS, SEP, MASK, EOD)


def train_unigram_counts(corpus: Corpus, tokenizer: Tokenizer, document_end: int | None = None) -> np.ndarray:
    """(V,) int64: how often each id occurs in the corpus's train split, tokenized as pretraining's cache is
    (encode_documents, [EOD] after each document). The whole split: a run of data.max_train_tokens trained on a
    slice of it, whose counts the checkpoint does not record."""
    tokens, _ = encode_documents(tokenizer, list(corpus.documents("train")), desc="train unigram", eod=document_end)
    return np.bincount(tokens.astype(np.int64), minlength=tokenizer.get_vocab_size())


def unigram_nll_without_eod(blocks: Tensor, train_counts: np.ndarray, excluded: Sequence[int], eod_id: int) -> float:
    """NLL per token of the blocks' targets that are not [EOD] (`target_positions(blocks) & (blocks != eod)`,
    the targets of nll_per_token_without_eod) under the add-1/2 smoothed unigram of `train_counts` over every id
    but `excluded` (common.vocabulary.smoothed_unigram_nll). The same tokens for every objective, so
    `unigram - model` is a learning scale shared by AR's exact NLL and a bidirectional model's bound.

    [EOD] is left out: an MLM never learns to predict it (it selects only ordinary tokens) and the unigram has
    no [EOD] (training's val/unigram_baseline leaves out every special id). [UNK] is kept, unlike in that
    baseline: it is a target every model is scored on here, so the unigram must give it its training share.

    A target of an excluded id raises ValueError. It cannot happen with armlm's packing: held_out_blocks puts
    [CLS] only at position 0 (not a target) and [EOD] only after documents; the one way in is a document whose
    text spells a special token ("[MASK]"), which the tokenizer reads as that token."""
    scored = blocks[target_positions(blocks) & (blocks != eod_id)].to(torch.int64)
    special = torch.isin(scored, torch.tensor(list(excluded), dtype=torch.int64))
    if special.any():
        found = sorted({int(i) for i in scored[special]})
        raise ArmlmError(f"held-out block targets hold the special ids {found}, which the unigram leaves out; "
                         "armlm's packing never puts them there (a document spelling a special token does)")
    counts = np.bincount(scored.numpy(), minlength=len(train_counts))
    return smoothed_unigram_nll(train_counts, counts, excluded=tuple(excluded))


def blocks_fingerprint(blocks: Tensor) -> str:
    """A short hash of the token ids: two reports compare only when they scored the same blocks (the same
    corpus, split, tokenizer, block size and count)."""
    return hashlib.sha1(blocks.to(torch.int64).numpy().tobytes()).hexdigest()[:16]


def per_token(per_block_nll: Tensor, per_block_tokens: Tensor) -> tuple[float, float]:
    """(NLL per token over all blocks, its standard error over blocks as a ratio estimator)."""
    value = float(per_block_nll.sum() / per_block_tokens.sum())
    n = len(per_block_nll)
    if n < 2:
        return value, 0.0
    residual = (per_block_nll - value * per_block_tokens) / per_block_tokens.double().mean()
    return value, float(residual.std(unbiased=True)) / math.sqrt(n)


def row_log_probs(model: Transformer, states: Tensor, targets: Tensor, excluded: int | None = None,
                  with_top: bool = False) -> tuple[Tensor, Tensor | None]:
    """log p(target) per row of states (N, d) under the LM head (`excluded` out of the support), float32, and
    `with_top` whether the target is the row's most probable token; a block of rows of logits at a time, so no
    N x V matrix is ever held whatever the block size and vocabulary."""
    step = max(1, LOGIT_BUDGET // model.config.vocab_size)
    log_probs, tops = [], []
    for first in range(0, len(targets), step):
        logits = model.logits(states[first:first + step]).float()
        if excluded is not None:
            logits[:, excluded] = float("-inf")
        wanted = targets[first:first + step, None]
        log_probs.append(torch.log_softmax(logits, dim=-1).gather(1, wanted).squeeze(1))
        if with_top:
            tops.append(logits.gather(1, wanted).squeeze(1) >= logits.max(-1).values)
    empty = states.new_zeros(0, dtype=torch.float32)
    log_prob = torch.cat(log_probs) if log_probs else empty
    return log_prob, (torch.cat(tops) if tops else empty.bool()) if with_top else None


def row_nll(model: Transformer, states: Tensor, targets: Tensor, excluded: int | None = None) -> Tensor:
    """-log p(target) per row of states (N, d): `row_log_probs` negated."""
    return -row_log_probs(model, states, targets, excluded)[0]


@torch.no_grad()
def exact_chain_rule_nll(model: Transformer, blocks: Tensor, eod_id: int, batch_size: int = 64,
                         next_states: Callable[[Tensor], Tensor] | None = None,
                         excluded: int | None = None) -> LikelihoodResult:
    """A chain-rule checkpoint's exact NLL per target token: sum over t >= 1 of -log p(x_t | x_<t), read from
    `next_states(ids)` ((B, T, d), row t predicting t + 1: Objective.next_token_states; default the backbone
    under causal attention), `excluded` out of the support."""
    device = next(model.parameters()).device
    per_position = []
    for start in range(0, blocks.shape[0], batch_size):
        ids = blocks[start:start + batch_size].to(device)
        states = model(ids, attention=CAUSAL) if next_states is None else next_states(ids)
        hidden = states[:, :-1].reshape(-1, model.config.d_model)
        rows = row_nll(model, hidden, ids[:, 1:].reshape(-1), excluded=excluded)
        per_position.append(rows.double().reshape(ids.shape[0], -1).cpu())
    nll = torch.cat(per_position)  # (N, T - 1): the targets 1..T-1
    keep = blocks[:, 1:] != eod_id
    value, stderr = per_token(nll.sum(1), torch.full((len(nll),), nll.shape[1], dtype=torch.float64))
    without_eod = float((nll * keep).sum() / keep.sum().clamp(min=1))
    return LikelihoodResult("exact", value, blocks.shape[0], nll.numel(), without_eod, int((~keep).sum()), stderr)


def model_masked_scorer(model: Transformer, mask_id: int, batch_size: int = 256, offset: int = 0) -> MaskedScorer:
    """The checkpoint's conditionals at masked positions, [MASK] out of the support, bidirectional attention.
    `offset` (Objective.masked_prediction_offset): a masked token at i is read from the state at i - offset
    (GPT-BERT's masked next-token prediction: 1). The vocabulary projection runs only where a token is read."""
    device = next(model.parameters()).device

    @torch.no_grad()
    def score(blocks: Tensor, masked: Tensor) -> Tensor:
        nll = torch.zeros(blocks.shape, dtype=torch.float64)
        for start in range(0, blocks.shape[0], batch_size):
            ids, where = blocks[start:start + batch_size].to(device), masked[start:start + batch_size].to(device)
            if not where.any():
                continue
            states = model(ids.masked_fill(where, mask_id), attention=BIDIRECTIONAL, output_mask=read_at(where, offset))
            part = torch.zeros(where.shape, dtype=torch.float64, device=device)
            # states come back in row-major order of the rows read, as ids[where] lists the targets
            part[where] = row_nll(model, states, ids[where], excluded=mask_id).double()
            nll[start:start + batch_size] = part.cpu()
        return nll

    return score


def read_at(where: Tensor, offset: int) -> Tensor:
    """(B, T) bool: the positions whose states predict the tokens at `where`, `offset` places before them (same
    row-major order). A position with nothing `offset` before it cannot be read: refused."""
    if offset == 0:
        return where
    if bool(where[:, :offset].any()):
        raise ArmlmError(f"a token in the first {offset} position(s) has no state {offset} before it to be read from")
    return torch.cat([where[:, offset:], torch.zeros_like(where[:, :offset])], dim=1)


def random_subsets(targets: Tensor, sizes: Tensor, generator: torch.Generator) -> Tensor:
    """(N, T) bool: for row r a uniformly random set of `sizes[r]` of its target positions."""
    keys = torch.rand(targets.shape, generator=generator, dtype=torch.float64)
    keys = keys.masked_fill(~targets, 2.0)  # non-targets sort last
    ranks = keys.argsort(dim=1).argsort(dim=1)
    return ranks < sizes[:, None]


def stratified_sizes(lengths: Tensor, strata: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """One masked-set size per (row, stratum): strata split 1..L_r into `strata` contiguous groups (as equal as
    integers allow) and a size is drawn uniformly inside each. Returns (sizes (N, S), group sizes (N, S)), so
    sum_s group_size * term(size) is an unbiased estimate of sum_{m=1..L} term(m)."""
    edges = torch.stack([torch.div(lengths * s, strata, rounding_mode="floor") for s in range(strata + 1)], dim=1)
    group = edges[:, 1:] - edges[:, :-1]  # sizes in (edges[s], edges[s + 1]]
    u = torch.rand(group.shape, generator=generator, dtype=torch.float64)
    sizes = edges[:, :-1] + 1 + (u * group).floor().long().clamp(max=(group - 1).clamp(min=0))
    return sizes, group


def any_order_bound(score: MaskedScorer, blocks: Tensor, *, strata: int, draws: int, max_draws: int,
                    target_rel_stderr: float, seed: int, eod_id: int | None = None,
                    progress: bool = True) -> LikelihoodResult:
    """The bound per target token, stratified over m, with `draws` replicates per block (each one masked set
    per stratum), doubled up to `max_draws` until the Monte-Carlo standard error is below `target_rel_stderr`
    of the value (a warning, and target_met=false, if max_draws comes first). The standard error is the
    replicates' spread per block, summed over blocks. B(x) is a sum over positions i of their terms, so the
    part over targets that are not [EOD] is reported too."""
    if strata < 1 or draws < 2 or max_draws < draws:
        raise ArmlmError(f"likelihood.strata={strata}, draws={draws}, max_draws={max_draws}: need strata >= 1, "
                         "draws >= 2 (the standard error needs two replicates) and max_draws >= draws")
    generator = torch.Generator().manual_seed(seed)
    targets = target_positions(blocks)
    lengths = targets.sum(1)
    strata = int(min(strata, int(lengths.min())))  # never an empty stratum
    keep = (blocks != eod_id) if eod_id is not None else torch.ones_like(blocks, dtype=torch.bool)
    replicates: list[Tensor] = []  # (N,) estimates of B(x), one per replicate
    replicates_kept: list[Tensor] = []  # the same, summed over the targets that are not [EOD]
    # Each block once per stratum: the same rows for every replicate, only the masked sets change.
    rows, row_targets = blocks.repeat_interleave(strata, dim=0), targets.repeat_interleave(strata, dim=0)
    keep_rows = keep.repeat_interleave(strata, dim=0)
    bar = tqdm(total=draws, desc="likelihood bound", unit="replicate", disable=not progress)
    wanted = draws
    while True:
        while len(replicates) < wanted:
            sizes, group = stratified_sizes(lengths, strata, generator)
            masked = random_subsets(row_targets, sizes.reshape(-1), generator)
            nll = score(rows, masked)
            for parts, scored in ((replicates, nll), (replicates_kept, nll * keep_rows)):
                per_set = scored.sum(1) / sizes.reshape(-1).double()  # (1/m) sum of the m NLLs
                parts.append((per_set.reshape(-1, strata) * group.double()).sum(1))
            bar.update(1)
        estimates = torch.stack(replicates)  # (R, N)
        total_tokens = float(lengths.sum())
        value = float(estimates.mean(0).sum()) / total_tokens
        mc_stderr = math.sqrt(float(estimates.var(0, unbiased=True).sum()) / len(replicates)) / total_tokens
        target_met = mc_stderr <= target_rel_stderr * value
        if target_met or wanted >= max_draws:
            break
        wanted = min(2 * wanted, max_draws)
        bar.total = wanted
        bar.refresh()
    bar.close()
    if not target_met:
        log.warning("likelihood bound: Monte-Carlo standard error %.4f is %.2f%% of %.4f after max_draws=%d "
                    "replicates, above target_rel_stderr=%g; raise likelihood.max_draws", mc_stderr,
                    100 * mc_stderr / value, value, len(replicates), target_rel_stderr)
    _, blocks_stderr = per_token(estimates.mean(0), lengths.double())
    kept_targets = targets & keep
    without_eod = float(torch.stack(replicates_kept).mean(0).sum() / kept_targets.sum().clamp(min=1))
    return LikelihoodResult("upper_bound", value, blocks.shape[0], int(total_tokens), without_eod,
                            int((targets & ~keep).sum()), blocks_stderr, mc_stderr, strata, len(replicates),
                            target_met)
