"""Whole-sentence log-probabilities of a pretrained checkpoint, by method, for zero-shot benchmarks (BLiMP).

    exact         sum_t log p(x_t | x_<t): the left-to-right factors of a chain-rule checkpoint (AR; the prefix LM
                  and the hybrid read causally; the PLM through its query stream in the identity order)
    pll           sum_t log q(x_t | x with t masked) (Salazar et al. 2020), for a checkpoint trained on masked
                  conditionals (MLM, MLM+NSP, masked diffusion, the hybrid)
    pll_word_l2r  the same, masking also the later subwords of t's own word (Kauf & Ivanova 2023), so a word split
                  into pieces is not scored by peeking at its own continuation
    bound         minus the any-order upper bound B(x) of ../shared/specs/likelihood-bounds.md, per sentence:
                  every masked-set size m once per draw, a random set of that size, so a draw is exact in m and
                  random only in which positions; its Monte-Carlo standard error comes from the draws

Which methods a model has is asked of its source's reading (sources.base.Reading: an armlm objective's class
attributes, or what transformers says of a Hugging Face model), never of its name. A sentence is scored in its
source's frame: its start token ([CLS] as a pretraining block begins; a Hugging Face model's own template, BERT's
[CLS] and [SEP] around it, a decoder's BOS before it), every token of the text a target and the frame's never. A continuation given a context (lm-evaluation-harness's loglikelihood) is the same with the context's
tokens first: visible to every method, never masked, never scored (`EncodedSentence.first_target`). Sentences of
one length and context run together, every masked copy of them in passes of about `tokens_per_pass` tokens with
the vocabulary projection only at the position read, so no padding reaches attention.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor
from tqdm import tqdm

from armlm.common.errors import ArmlmError
from armlm.diagnostics.likelihood import model_masked_scorer, random_subsets, row_log_probs
from armlm.models.attention import BIDIRECTIONAL
from armlm.objectives.base import Objective
from armlm.sources.base import Backbone, Reading, SpecialTokens, as_reading

METHODS = ("exact", "pll", "pll_word_l2r", "bound")


@dataclass(frozen=True)
class EncodedSentence:
    ids: tuple[int, ...]  # the start token, any context's tokens, the tokens scored, the frame's end tokens
    word_ids: tuple[int, ...]  # per position, the word it belongs to (the pre-tokenizer's words); -1 for the frame
    first_target: int = 1  # positions before it (the start token and the context) are conditioned on, not scored
    trailing: int = 0  # the frame's end tokens (BERT's [SEP]): seen by a bidirectional reader, never scored

    def __post_init__(self) -> None:
        if not 1 <= self.first_target < self.stop or len(self.word_ids) != len(self.ids) or self.trailing < 0:
            raise ArmlmError(f"an encoded sentence needs a start token, at least one target after position "
                             f"{self.first_target} and a word id per token: got {len(self.ids)} ids, "
                             f"{len(self.word_ids)} word ids, {self.trailing} trailing")

    @property
    def stop(self) -> int:
        """One past the last target."""
        return len(self.ids) - self.trailing

    @property
    def targets(self) -> int:
        return self.stop - self.first_target


def encode_sentences(tokenizer: Tokenizer, texts: Sequence[str], special: SpecialTokens) -> list[EncodedSentence]:
    """Each text in its source's frame (`special.start`, its tokens, `special.end`), with its word ids. The
    tokenizer's own normaliser applies (armlm's WordPiece lowercases; punctuation is its own word)."""
    encoded = []
    for text, enc in zip(texts, tokenizer.encode_batch(list(texts), add_special_tokens=False), strict=True):
        if not enc.ids:
            raise ArmlmError(f"sentence {text!r} encodes to no tokens; drop it from the input")
        words = [-1 if w is None else w for w in enc.word_ids]
        end = special.end
        encoded.append(EncodedSentence((special.start, *enc.ids, *end), (-1, *words, *[-1] * len(end)),
                                       trailing=len(end)))
    return encoded


def word_boundaries_known(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer says where words end (a pre-tokenizer splits the text into words first): without one,
    a whole text is a single word and PLL-word-l2r would mask every later token."""
    return tokenizer.pre_tokenizer is not None


def after_context(sentence: EncodedSentence, context: Sequence[int]) -> EncodedSentence:
    """The sentence read after `context` (token ids placed between its start token and it): visible to every
    method, never masked, never scored. An empty context gives the sentence back unchanged."""
    if not context:
        return sentence
    return EncodedSentence((sentence.ids[0], *context, *sentence.ids[1:]),
                           (-1, *[-1] * len(context), *sentence.word_ids[1:]), sentence.first_target + len(context),
                           sentence.trailing)


def available_methods(reading: Reading | type[Objective]) -> tuple[str, ...]:
    """The methods a model can be scored by: `exact` where it reads by the chain rule, the masked ones where it
    was trained on masked conditionals."""
    reading = as_reading(reading)
    exact = ("exact",) if reading.scoring == "chain_rule" else ()
    masked = ("pll", "pll_word_l2r", "bound") if reading.masked_conditionals else ()
    return exact + masked


@dataclass(frozen=True)
class SentenceScores:
    method: str
    log_prob: np.ndarray  # (N,) float64: summed log-probability, or minus the bound
    tokens: np.ndarray  # (N,) int: target tokens scored (every token after [CLS] and the context)
    mc_stderr: np.ndarray  # (N,) Monte-Carlo standard error of log_prob (0 for the deterministic methods)
    # (N,) bool: every target is the model's top token where it is read (exact: given the tokens before it; the
    # PLLs: at its masked position). None for the bound, which reads no single conditional per token.
    greedy: np.ndarray | None = None


def length_groups(sentences: Sequence[EncodedSentence]) -> Iterator[tuple[np.ndarray, Tensor, Tensor, int, int]]:
    """(indices, ids (n, T), word ids (n, T), first target, stop) per distinct length, context length and frame,
    so every batch is rectangular and shares its targets."""
    shapes = np.array([(len(s.ids), s.first_target, s.stop) for s in sentences]).reshape(-1, 3)
    for length, first, stop in np.unique(shapes, axis=0):
        idx = np.flatnonzero((shapes[:, 0] == length) & (shapes[:, 1] == first) & (shapes[:, 2] == stop))
        yield (idx, torch.tensor([sentences[i].ids for i in idx]), torch.tensor([sentences[i].word_ids for i in idx]),
               int(first), int(stop))


def masked_sets(word_ids: Tensor, whole_word_right: bool, first: int = 1,
                stop: int | None = None) -> tuple[Tensor, Tensor]:
    """For n sentences of length T whose targets are positions first..stop-1 (stop defaults to T): per (sentence,
    target t) the positions masked, (n * L, T) bool with L = stop - first, and the position read, (n * L,). PLL masks
    t alone; `whole_word_right` also masks the positions after t inside t's word (PLL-word-l2r)."""
    n, length = word_ids.shape
    targets = torch.arange(first, length if stop is None else stop)
    positions = torch.arange(length)
    read = positions[None, :] == targets[:, None]  # (L, T)
    masked = read[None].expand(n, -1, -1)
    if whole_word_right:
        same_word = word_ids[:, None, :] == word_ids[:, targets, None]  # (n, L, T): position q in target t's word
        later = positions[None, :] > targets[:, None]
        masked = masked | (same_word & later[None])
    return masked.reshape(n * len(targets), length), targets.repeat(n)


class SentenceScorer:
    """A model's sentence scores by method. `model`: its backbone (eval mode); `reading`: how it reads (its source's);
    `mask_id`: its mask token (None where the tokenizer has none: only `exact` then); `word_boundaries`: whether its
    tokenizer says where words end (`word_boundaries_known`), which PLL-word-l2r needs."""

    def __init__(self, model: Backbone, reading: Reading | type[Objective], mask_id: int | None, *,
                 tokens_per_pass: int = 16384,
                 bound_draws: int = 2, seed: int = 1, word_boundaries: bool = True) -> None:
        if tokens_per_pass < 1 or bound_draws < 2:
            raise ArmlmError(f"tokens_per_pass={tokens_per_pass}, bound_draws={bound_draws}: need a positive pass "
                             "size and at least 2 draws (the bound's standard error needs two)")
        reading = as_reading(reading)
        reading.refuse_unless_language_model("zero-shot scoring")
        self.model, self.reading, self.mask_id = model.eval(), reading, mask_id
        self.tokens_per_pass, self.bound_draws, self.seed = tokens_per_pass, bound_draws, seed
        self.word_boundaries = word_boundaries
        # `exact` and PLL read the model as training normalised it: over the vocabulary with [MASK] unless the
        # objective takes it out of the softmax. The bound always leaves [MASK] out (the spec's q).
        self.excluded = None if reading.mask_in_support else mask_id
        self.offset = reading.masked_prediction_offset  # where its masked conditionals are read (GPT-BERT: i - 1)
        self.device = next(model.parameters()).device

    @property
    def methods(self) -> tuple[str, ...]:
        masked = () if self.mask_id is None else ("pll", "pll_word_l2r", "bound")
        return tuple(m for m in available_methods(self.reading) if m == "exact" or m in masked)

    def check_method(self, method: str) -> None:
        if method not in METHODS:
            raise ArmlmError(f"method={method!r}; choose from {list(METHODS)}")
        if method != "exact" and self.mask_id is None:
            raise ArmlmError(f"{self.reading.name} has no mask token, so it cannot be scored by {method!r}, which masks "
                             f"positions; its methods are {list(self.methods)}")
        if method not in self.methods:
            raise ArmlmError(f"{self.reading.name} cannot be scored by {method!r}: its methods are {list(self.methods)}")
        if method == "pll_word_l2r" and not self.word_boundaries:
            raise ArmlmError("method='pll_word_l2r' masks the rest of each word, but this tokenizer has no "
                             "pre-tokenizer, so its tokens cannot be aligned to words; use method=pll")

    @torch.no_grad()
    def score(self, sentences: Sequence[EncodedSentence], method: str, progress: bool = True) -> SentenceScores:
        self.check_method(method)
        n = len(sentences)
        log_prob, stderr, greedy = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
        tokens = np.array([s.targets for s in sentences])
        bar = tqdm(total=n, desc=f"scoring ({method})", unit="sentence", disable=not progress)
        for idx, ids, words, first, stop in length_groups(sentences):
            if method == "exact":
                log_prob[idx], greedy[idx] = self._exact(ids, first, stop)
            elif method == "bound":
                log_prob[idx], stderr[idx] = self._bound(ids, first, stop)
            else:
                log_prob[idx], greedy[idx] = self._pll(ids, words, first, stop,
                                                       whole_word_right=method == "pll_word_l2r")
            bar.update(len(idx))
        bar.close()
        return SentenceScores(method, log_prob, tokens, stderr, None if method == "bound" else greedy)

    def _rows_per_pass(self, length: int) -> int:
        return max(1, self.tokens_per_pass // length)

    def _exact(self, ids: Tensor, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        n, length = ids.shape
        log_prob, greedy = torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.bool)
        step = self._rows_per_pass(length)
        for start in range(0, n, step):
            part = slice(start, start + step)
            row_ids = ids[part].to(self.device)
            # Row t of the left-to-right states predicts token t + 1: targets first..T-1 are read at first-1..T-2.
            states = self.reading.next_token_states(self.model, row_ids, mask_id=self.mask_id)[:, first - 1:stop - 1]
            logp, top = row_log_probs(self.model, states.reshape(-1, states.shape[-1]),
                                      row_ids[:, first:stop].reshape(-1), self.excluded, with_top=True)
            log_prob[part] = logp.double().reshape(len(row_ids), -1).sum(1).cpu()
            greedy[part] = top.reshape(len(row_ids), -1).all(1).cpu()
        return log_prob.numpy(), greedy.numpy()

    def _pll(self, ids: Tensor, words: Tensor, first: int, stop: int,
             whole_word_right: bool) -> tuple[np.ndarray, np.ndarray]:
        n, length = ids.shape
        masked, read = masked_sets(words, whole_word_right, first, stop)
        targets_per_row = stop - first
        rows = ids.repeat_interleave(targets_per_row, dim=0)
        log_prob = torch.empty(len(rows), dtype=torch.float64)
        top = torch.empty(len(rows), dtype=torch.bool)
        step = self._rows_per_pass(length)
        for start in range(0, len(rows), step):
            part = slice(start, start + step)
            row_ids = rows[part].to(self.device)
            where = torch.zeros_like(row_ids, dtype=torch.bool)
            where[torch.arange(len(row_ids)), read[part] - self.offset] = True
            states = self.model(row_ids.masked_fill(masked[part].to(self.device), self.mask_id),
                                attention=BIDIRECTIONAL, output_mask=where)
            targets = row_ids[torch.arange(len(row_ids)), read[part]]
            logp, is_top = row_log_probs(self.model, states, targets, self.excluded, with_top=True)
            log_prob[part], top[part] = logp.double().cpu(), is_top.cpu()
        return (log_prob.reshape(n, targets_per_row).sum(1).numpy(),
                top.reshape(n, targets_per_row).all(1).numpy())

    def _bound(self, ids: Tensor, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        n, length = ids.shape
        targets_per_row = stop - first
        # One row per (sentence, m), m = 1..L: each draw takes one random masked set of every size, drawn among
        # the targets only (the context stays visible).
        rows = ids.repeat_interleave(targets_per_row, dim=0)
        sizes = torch.arange(1, targets_per_row + 1).repeat(n)
        row_targets = torch.ones_like(rows, dtype=torch.bool)
        row_targets[:, :first] = False
        row_targets[:, stop:] = False
        score = model_masked_scorer(self.model, self.mask_id, batch_size=self._rows_per_pass(length),
                                    offset=self.offset)
        # Each sentence's masked sets come from a generator seeded by the sentence itself, so its score does not
        # depend on what else is scored with it (the good and the bad sentence of a pair, a harness's requests).
        generators = [torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(row.numpy().tobytes()))
                      for row in ids]
        draws = []
        for _ in range(self.bound_draws):
            masked = torch.cat([random_subsets(row_targets[:targets_per_row], sizes[:targets_per_row], g)
                                for g in generators])
            per_set = score(rows, masked).sum(1) / sizes.double()  # (1/m) sum of the m NLLs
            draws.append(per_set.reshape(n, targets_per_row).sum(1))  # one estimate of B(x) per sentence
        estimates = torch.stack(draws)  # (D, n)
        stderr = estimates.std(0, unbiased=True) / math.sqrt(self.bound_draws)
        return -estimates.mean(0).numpy(), stderr.numpy()

