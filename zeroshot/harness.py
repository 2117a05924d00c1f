"""lm-evaluation-harness's `armlm` model type: any model source (an armlm run or checkpoint, a Hugging Face folder
or hf:<id>), scored the way it allows.

    armlm harness --model armlm --model_args checkpoint=<run folder>,method=pll --tasks blimp_local

(`armlm harness` is lm-eval's own command line with this module imported, so `--model armlm` is registered.)
- `loglikelihood(context, continuation)`: the start token ([CLS]; a Hugging Face model's own), the context's tokens,
  the continuation's, and the model's end tokens (BERT's [SEP]; none for armlm or a decoder), scored by the
  checkpoint's method (zeroshot.scoring): `exact` for chain-rule readers; `pll` / `pll_word_l2r` (each
  continuation token masked in turn, the context always visible) or `bound` (minus the any-order bound over the
  continuation given the context) for checkpoints trained on masked conditionals. `is_greedy`: every continuation
  token is the top token where it is read (the bound reads it as PLL does).
- `loglikelihood_rolling(text)`: the text in windows of the positions the checkpoint was trained on, each window
  `[CLS]` + as much earlier text as fits + the tokens it scores (lm-eval's disjoint rolling windows), summed.
- `generate_until`: the objective's own sampler (generation.decode: left to right, or iterative unmasking),
  greedy unless the task asks for sampling, cut at the first stop string.
Texts are tokenized as lm-eval's `hf` backend does for causal models (the continuation's tokens are those of
context + continuation after the context's), so on an AR checkpoint the numbers equal `hf` on its export.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

# lm-eval fills its registry with its own model types (hf, ...) only when it finds the registry empty; registering
# armlm's first would hide them, so `armlm harness --model hf` found no hf: put lm-eval's in before armlm's
import lm_eval.models  # noqa: F401
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window, simple_parse_args_string

from armlm.common.devices import check_device
from armlm.common.errors import ArmlmError
from armlm.common.rules import meant_among
from armlm.generation.decode import Request, generator_for
from armlm.generation.sampling import SamplingSettings
from armlm.sources import open_source
from armlm.zeroshot.scoring import EncodedSentence, SentenceScorer, word_boundaries_known

DEFAULT_MAX_GEN_TOKS = 32


def refuse_unknown_model_args(given: Mapping[str, Any]) -> None:
    """--model_args that ArmlmLM takes, or one line naming the one it does not and those it does."""
    taken = [name for name in inspect.signature(ArmlmLM.__init__).parameters if name != "self"]
    unknown = [name for name in given if name not in taken]
    if unknown:
        meant = meant_among(unknown[0], taken)
        raise ArmlmError(f"--model_args {unknown[0]}=...: armlm's model takes no such setting; "
                         f"{f'did you mean {meant[0]}? ' if meant else ''}it takes {', '.join(taken)}")


@register_model("armlm")
class ArmlmLM(LM):
    """`checkpoint`: a model source (sources.open_source); `method`: one of its scoring methods (default its first:
    `exact` for a chain-rule reader, else `pll`). lm-eval's `batch_size` is accepted and not used: passes are sized
    by `tokens_per_pass`, as in `armlm zeroshot`. `trust_remote_code`: run a Hugging Face folder's own modelling file."""

    def __init__(self, checkpoint: str, method: str | None = None, device: str = "cpu",
                 tokens_per_pass: int = 16384, bound_draws: int = 2, seed: int = 1,
                 batch_size: Any = None, max_batch_size: Any = None, trust_remote_code: bool = False) -> None:
        super().__init__()
        check_device(str(device), "add --device cpu (lm-eval's default device is cuda)")
        source = open_source(checkpoint, device, trust_remote_code=str(trust_remote_code).lower() in ("true", "1"))
        self.reading, self.model, self.tokenizer = source.reading, source.backbone, source.tokenizer
        self.special = source.special
        self.cls_id, self.eod_id, self.mask_id = source.special.start, source.special.document_end, source.special.mask
        self.scorer = SentenceScorer(self.model, self.reading, self.mask_id, tokens_per_pass=int(tokens_per_pass),
                                     bound_draws=int(bound_draws), seed=int(seed),
                                     word_boundaries=word_boundaries_known(self.tokenizer))
        self.method = str(method) if method is not None else self.scorer.methods[0]
        self.scorer.check_method(self.method)
        # positions for the start token and the text: what the model takes, less its end tokens
        self.window = source.longest_input - len(source.special.end)
        self.seed, self.torch_device = int(seed), device

    # lm-eval builds the model from --model_args by one of these; a setting __init__ does not take (methd=pll) was a
    # TypeError's traceback from inside lm-eval
    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict[str, Any] | None = None) -> ArmlmLM:
        refuse_unknown_model_args(arg_dict)
        return super().create_from_arg_obj(arg_dict, additional_config)

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict[str, Any] | None = None) -> ArmlmLM:
        refuse_unknown_model_args(simple_parse_args_string(arg_string))
        return super().create_from_arg_string(arg_string, additional_config)

    def _framed(self, ids: Sequence[int], words: Sequence[int], first_target: int) -> EncodedSentence:
        end = self.special.end
        return EncodedSentence((self.cls_id, *ids, *end), (-1, *words, *[-1] * len(end)), first_target=first_target,
                               trailing=len(end))

    # -- encoding ---------------------------------------------------------------------------------------------

    def _encode(self, text: str) -> tuple[list[int], list[int]]:
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return list(enc.ids), [-1 if w is None else w for w in enc.word_ids]

    def encode_pair(self, context: str, continuation: str) -> EncodedSentence:
        """`[CLS]` + context + continuation, the continuation's tokens those of the whole text after the context's
        (lm-eval's `_encode_pair`; a trailing space of the context moves to the continuation). A text longer than
        the trained positions keeps `[CLS]` and its last tokens, as lm-eval's backends cut contexts on the left."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        ids, words = self._encode(context + continuation)
        first = len(self._encode(context)[0]) if context else 0
        if first >= len(ids):
            raise ArmlmError(f"continuation {continuation!r} encodes to no tokens after context {context[-60:]!r}")
        if len(ids) - first > self.window - 1:
            raise ArmlmError(f"continuation {continuation[:60]!r}... has {len(ids) - first} tokens; with [CLS] the "
                             f"checkpoint was trained on {self.window} positions. Use loglikelihood_rolling for "
                             "long texts, or a task with shorter continuations")
        cut = max(0, len(ids) - (self.window - 1))
        return self._framed(ids[cut:], words[cut:], 1 + first - cut)

    def rolling_windows(self, text: str) -> list[EncodedSentence]:
        """lm-eval's disjoint rolling windows over the text's tokens, each led by `[CLS]` as every pretraining
        block was, so a window holds at most the trained positions."""
        ids, words = self._encode(text)
        if not ids:
            return []
        windows = []
        # The windows are computed over token indices, so the tokens' word ids travel with them. lm-eval's window
        # of n inputs holds n + 1 tokens (its last target is never an input); here every token is an input (the
        # masked methods read all of them), so with [CLS] a window of window - 2 fills the trained positions.
        for context, targets in map(make_disjoint_window, get_rolling_token_windows(
                list(range(len(ids))), prefix_token=-1, max_seq_len=self.window - 2, context_len=1)):
            kept = [i for i in context if i >= 0] + targets
            windows.append(self._framed([ids[i] for i in kept], [words[i] for i in kept], 1 + len(kept) - len(targets)))
        return windows

    # -- lm-eval's requests -----------------------------------------------------------------------------------

    def _scores(self, sentences: Sequence[EncodedSentence], disable_tqdm: bool) -> tuple[list[float], list[bool]]:
        scores = self.scorer.score(sentences, self.method, progress=not disable_tqdm)
        greedy = scores.greedy
        if greedy is None:  # the bound reads no single conditional per token: greedy as the PLL reads it
            greedy = self.scorer.score(sentences, "pll", progress=False).greedy
        return scores.log_prob.tolist(), greedy.tolist()

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        if not requests:
            return []
        sentences = [self.encode_pair(*request.args) for request in requests]
        log_probs, greedy = self._scores(sentences, disable_tqdm)
        return list(zip(log_probs, greedy, strict=True))

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        per_request = [self.rolling_windows(request.args[0]) for request in requests]
        flat = [w for windows in per_request for w in windows]
        log_probs = self._scores(flat, disable_tqdm)[0] if flat else []
        totals, start = [], 0
        for windows in per_request:
            totals.append(float(sum(log_probs[start:start + len(windows)])))
            start += len(windows)
        return totals

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        generate = generator_for(self.reading)
        # a sampler never proposes a special token but the document end, where a sample stops
        banned = torch.tensor([t for t in self.special.specials if t != self.eod_id])
        texts = []
        for k, request in enumerate(requests):
            context, settings = request.args
            settings = dict(settings or {})
            until = settings.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            new_tokens = int(settings.pop("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            sampling = SamplingSettings(float(settings.get("temperature", 0.0)) if settings.get("do_sample") else 0.0,
                                        int(settings.get("top_k", 0) or 0), float(settings.get("top_p", 1.0) or 1.0))
            ids = self._encode(context)[0]
            room = self.window - 1 - new_tokens
            if new_tokens < 1:  # a Request would refuse it as new_tokens=, which no task names
                raise ArmlmError(f"max_gen_toks={new_tokens}: a generation task asks for at least one token; raise it "
                                 "in the task's generation_kwargs")
            if room < 0:
                raise ArmlmError(f"max_gen_toks={new_tokens} does not fit the {self.window} positions the checkpoint "
                                 "was trained on; lower it in the task's generation_kwargs")
            prompt = torch.tensor([self.cls_id, *(ids[len(ids) - room:] if room else [])])
            request_ = Request(prompt, new_tokens, 1, sampling, banned, self.eod_id, self.mask_id)
            generator = torch.Generator(device=self.torch_device).manual_seed(self.seed * 1_000_003 + k)
            row = generate(self.model, request_, generator, self.reading)[0, len(prompt):].tolist()
            if self.eod_id in row:
                row = row[:row.index(self.eod_id)]
            text = self.tokenizer.decode(row)
            cuts = [text.index(stop) for stop in until if stop and stop in text]
            texts.append(text[:min(cuts)] if cuts else text)
        return texts
