"""A Hugging Face masked or causal LM as a ModelSource, through transformers' Auto classes and its own tokenizer.

What it declares is read from transformers and the tokenizer, never from a model's name:
- masked or causal: the class it was saved as (`config.architectures`), looked up in transformers' own masked-LM and
  causal-LM registries; a config without one reads as the masked LM its type has, else as its causal LM;
- attention: a masked LM attends bidirectionally, a causal LM causally; the other kind too where the model takes a
  4D attention mask and a probe at load shows it obeys one (a decoder read with its causal mask removed, as
  F1_mask needs), else it is refused;
- scoring: a masked LM's conditionals (PLL, the bound, the MLM joints), a causal LM's chain rule;
- special tokens: the tokenizer's own template (what `add_special_tokens=True` puts around a text) and its mask, pad,
  BOS/EOS tokens. A decoder whose template adds nothing (GPT-2) starts each text with its BOS (else EOS), as
  lm-evaluation-harness does, so the first token has something to be predicted from;
- the longest input: the tokenizer's `model_max_length` where it is set, else the config's positions.

The LM head is whatever the model computes after its base model. `HuggingFaceBackbone.logits` hands the base model's
states to the model's own head, so BERT's transform, DistilBERT's projector and a decoder's `lm_head` all run as
transformers wrote them; a probe at load holds head(base(x)) equal to the model's own logits, or the model is refused.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from models.attention import Attention
from sources.base import ModelSource, Reading, SpecialTokens, causal_next_token_states

HUB_PREFIX = "hf:"
PROBE_TOLERANCE = 1e-4  # head(base(x)) against the model's own logits, fp32
UNSET_MAX_LENGTH = 1_000_000  # transformers writes ~1e30 where a tokenizer has no model_max_length


@dataclass(frozen=True)
class BackboneShape:
    """What the instruments read of `backbone.config` (models.backbone.ModelConfig's names)."""

    vocab_size: int
    max_len: int
    n_layers: int
    d_model: int

    def to_dict(self) -> dict[str, int]:
        return {"vocab_size": self.vocab_size, "max_len": self.max_len, "n_layers": self.n_layers,
                "d_model": self.d_model}


class _Handoff(nn.Module):
    """Stands in for a transformers LM's base model: runs it, or, while `handed` holds states, returns them, so the
    LM's own forward applies its head to states it did not compute."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.handed: Tensor | None = None

    def get_input_embeddings(self) -> nn.Module:  # what a transformers LM asks its base model for
        return self.inner.get_input_embeddings()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.handed is None:
            return self.inner(*args, **kwargs)
        from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=self.handed)


class HuggingFaceBackbone(nn.Module):
    """A transformers masked or causal LM behind the backbone interface (sources.base.Backbone): `forward` gives the
    base model's last hidden states, `layer_states` every layer's (the embeddings first when asked), `logits` the
    model's own head on given states. It attends as its class does, and in the other static kind only where
    `switched_attention` proved the model obeys a 4D mask (`attentions`)."""

    def __init__(self, lm: nn.Module, attention_kind: str) -> None:
        super().__init__()
        self.lm = lm.eval()
        prefix = lm.base_model_prefix
        if not prefix or getattr(lm, prefix, None) is None:
            raise ValueError(f"{type(lm).__name__} has no base model under base_model_prefix={prefix!r}; armlm reads a "
                             "transformers LM as a base model and a head")
        self._handoff = _Handoff(getattr(lm, prefix))
        setattr(lm, prefix, self._handoff)
        self.attention_kind = attention_kind
        self.attentions: tuple[str, ...] = (attention_kind,)
        self.base = self._handoff.inner
        self._takes_types = "token_type_ids" in inspect.signature(self.base.forward).parameters
        config = lm.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.config = BackboneShape(vocab_size=int(lm.get_output_embeddings().weight.shape[0]),
                                    max_len=int(getattr(text, "max_position_embeddings", 0) or getattr(text, "n_positions")),
                                    n_layers=int(text.num_hidden_layers), d_model=int(text.hidden_size))

    def _check(self, attention: Attention) -> None:
        if attention.kind not in self.attentions or attention.documents is not None:
            raise ValueError(f"{type(self.lm).__name__} attends {' or '.join(self.attentions)} only (its transformers "
                             f"class fixes its mask), not {attention.kind}"
                             + (" within documents" if attention.documents is not None else ""))

    def _mask(self, attention: Attention, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor | None:
        """The model's own 2D padding mask under its native attention; otherwise a (B, 1, T, T) bool mask, True
        where a query may read a key, padding folded in."""
        if attention.kind == self.attention_kind:
            return attention_mask
        b, t = input_ids.shape
        allowed = torch.ones(b, 1, t, t, dtype=torch.bool, device=input_ids.device)
        if attention.kind == "causal":
            allowed = allowed.tril()
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        return allowed

    def _run(self, input_ids: Tensor, attention: Attention, attention_mask: Tensor | None,
             token_type_ids: Tensor | None, hidden_states: bool) -> Any:
        self._check(attention)
        if input_ids.shape[1] > self.config.max_len:
            raise ValueError(f"an input of {input_ids.shape[1]} tokens is longer than the {self.config.max_len} positions "
                             f"{type(self.lm).__name__} takes; shorten it")
        kwargs: dict[str, Any] = {"attention_mask": self._mask(attention, input_ids, attention_mask),
                                  "output_hidden_states": hidden_states}
        # Segment ids go in only where the template uses them: GPT-2 adds wte[type] to every position when given
        # any, so all-zero ids would not be its default.
        if self._takes_types and token_type_ids is not None and bool(token_type_ids.any()):
            kwargs["token_type_ids"] = token_type_ids
        return self.base(input_ids=input_ids, return_dict=True, **kwargs)

    def forward(self, input_ids: Tensor, *, attention: Attention, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, output_mask: Tensor | None = None,
                position_ids: Tensor | None = None) -> Tensor:
        if position_ids is not None:
            raise ValueError(f"{type(self.lm).__name__} is read at its own positions; position_ids are armlm's PLM's")
        hidden = self._run(input_ids, attention, attention_mask, token_type_ids, hidden_states=False)[0]
        return hidden if output_mask is None else hidden[output_mask]

    def layer_states(self, input_ids: Tensor, *, attention: Attention, attention_mask: Tensor | None = None,
                     token_type_ids: Tensor | None = None, with_embeddings: bool = False) -> list[Tensor]:
        """transformers' `hidden_states`: the embeddings, then each layer's output as the model returns it (a
        pre-LN decoder's last one after its final norm, the others before it)."""
        states = list(self._run(input_ids, attention, attention_mask, token_type_ids, hidden_states=True).hidden_states)
        return states if with_embeddings else states[1:]

    def logits(self, hidden: Tensor) -> Tensor:
        """The model's own head on states of any leading shape."""
        flat = hidden.reshape(1, -1, hidden.shape[-1])
        self._handoff.handed = flat
        try:
            logits = self.lm(input_ids=torch.zeros(flat.shape[:2], dtype=torch.long, device=flat.device)).logits
        finally:
            self._handoff.handed = None
        return logits.reshape(*hidden.shape[:-1], logits.shape[-1])


def parse_hub(spec: str) -> tuple[str, str | None]:
    """`hf:<id>[@revision]` -> (id, revision)."""
    ref = spec[len(HUB_PREFIX):]
    name, _, revision = ref.partition("@")
    if not name:
        raise ValueError(f"checkpoint={spec!r} names no model; give hf:<hub id>[@revision], e.g. hf:bert-base-cased")
    return name, revision or None


def is_huggingface_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


def _is_masked(config: Any) -> bool:
    """Whether the saved model is a masked LM, asked of transformers' registries of masked and causal LM classes."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )
    # a folder with its own modelling file names its classes in auto_map ("module.ClassName")
    auto_map = {k: str(v).rpartition(".")[2] for k, v in (getattr(config, "auto_map", None) or {}).items()}
    masked = MODEL_FOR_MASKED_LM_MAPPING_NAMES.get(config.model_type, auto_map.get("AutoModelForMaskedLM"))
    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type, auto_map.get("AutoModelForCausalLM"))
    saved_as = set(getattr(config, "architectures", None) or [])
    if masked in saved_as or (causal is None and masked is not None):
        return True
    if causal in saved_as or masked is None:
        if causal is None:
            raise ValueError(f"{config.model_type!r} models have neither a masked-LM nor a causal-LM class in "
                             "transformers; armlm reads those two kinds")
        return False
    return not getattr(config, "is_decoder", False)


def _offline_hint(ref: str, err: Exception) -> ValueError:
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
    return ValueError(f"hf:{ref} cannot be loaded: {why} and it is not in the local cache ({type(err).__name__}). Where "
                      f"the hub is reachable, download it (`hf download {ref} --local-dir <folder>`) and give "
                      "checkpoint=<folder>, or point HF_HOME at a cache that holds it and set HF_HUB_OFFLINE=1")


def _pair_template(backend: Tokenizer, segment_types: bool) -> tuple[tuple[int, ...], int]:
    """The tokens the template puts between two texts (BERT's [SEP], RoBERTa's </s></s>) and the second text's
    segment id: the template's where the model has a segment embedding of more than one row, else 0 (RoBERTa's one
    row; GPT-2 would add a token embedding for any id it is given)."""
    pair = backend.encode("a", "b", add_special_tokens=True)
    sequence = pair.sequence_ids
    last_a = max(k for k, q in enumerate(sequence) if q == 0)
    first_b = min(k for k, q in enumerate(sequence) if q == 1)
    return tuple(pair.ids[last_a + 1:first_b]), pair.type_ids[first_b] if segment_types else 0


def _word_prefix(backend: Tokenizer) -> str:
    """What a word encoded on its own needs in front to get the pieces it has in running text: nothing for a
    tokenizer that splits words first (WordPiece), a space for a byte-level BPE, whose pieces carry it."""
    text, words = "the cat sat on it", ["the", "cat", "sat", "on", "it"]
    running = backend.encode(text, add_special_tokens=False).ids
    for prefix in ("", " "):
        pieces = [prefix + w if k else w for k, w in enumerate(words)]
        if backend.encode(pieces, is_pretokenized=True, add_special_tokens=False).ids == running:
            return prefix
    return ""


def _special_tokens(hf_tokenizer: Any, backend: Tokenizer, masked: bool, origin: str,
                    segment_types: bool) -> SpecialTokens:
    framed = backend.encode("a", add_special_tokens=True)
    ids, special_mask = framed.ids, framed.special_tokens_mask
    first_plain = special_mask.index(0) if 0 in special_mask else len(ids)
    last_plain = len(special_mask) - special_mask[::-1].index(0) if 0 in special_mask else 0
    prefix, suffix = ids[:first_plain], tuple(ids[last_plain:])
    start = prefix[-1] if prefix else next(
        (t for t in (hf_tokenizer.bos_token_id, hf_tokenizer.cls_token_id, hf_tokenizer.eos_token_id) if t is not None),
        None)
    if start is None:
        raise ValueError(f"{origin}'s tokenizer has no start token (BOS, CLS or EOS) to begin a text with; a text's "
                         "first token would have nothing to be predicted from")
    between, second_type = _pair_template(backend, segment_types)
    document_end = hf_tokenizer.eos_token_id if not masked else (hf_tokenizer.sep_token_id or hf_tokenizer.eos_token_id)
    return SpecialTokens(start=start, end=suffix if masked else (), mask=hf_tokenizer.mask_token_id,
                         pad=hf_tokenizer.pad_token_id, document_end=document_end,
                         specials=tuple(sorted(set(hf_tokenizer.all_special_ids) | {start})),
                         separator=hf_tokenizer.sep_token_id, unknown=hf_tokenizer.unk_token_id, task_end=suffix,
                         task_between=between, second_type=second_type, word_prefix=_word_prefix(backend))


def _longest_input(hf_tokenizer: Any, positions: int) -> int:
    """The tokenizer's model_max_length where it sets one (RoBERTa's 512 of 514 position rows), else the config's."""
    declared = int(hf_tokenizer.model_max_length or 0)
    return min(declared, positions) if 0 < declared < UNSET_MAX_LENGTH else positions


def _probe(backbone: HuggingFaceBackbone, source: str, start: int) -> None:
    """head(base(x)) must be the model's own logits: a model that computes anything else from more than its base
    model's last states (a soft cap, say) would be misread, so it is refused."""
    ids = torch.tensor([[start] + [i % backbone.config.vocab_size for i in range(7, 14)]],
                       device=next(backbone.parameters()).device)
    attention = Attention.named(backbone.attention_kind)
    with torch.no_grad():
        own = backbone.lm(input_ids=ids).logits
        try:
            split = backbone.logits(backbone(ids, attention=attention))
        except TypeError as err:  # a base model that does not take transformers' arguments (input_ids=, ...)
            raise ValueError(f"{source}: its base model ({type(backbone.base).__name__}) does not take transformers' "
                             f"arguments ({err}); armlm reads a model as a transformers base model and a head") from err
    gap = float((own - split).abs().max())
    if gap > PROBE_TOLERANCE:
        raise ValueError(f"{source}: its logits differ from its head applied to its base model's states by {gap:.2e}; "
                         "armlm cannot read its states apart from its head")


def switched_attention(backbone: HuggingFaceBackbone, start: int) -> tuple[str, ...]:
    """The static attention kinds the backbone obeys, probed on 8 tokens: the native one, and the other where a 4D
    mask of it is taken and followed (bidirectional: the first state moves when the last token changes; causal: it
    does not, and equals the state without that token)."""
    other = "causal" if backbone.attention_kind == "bidirectional" else "bidirectional"
    device = next(backbone.parameters()).device
    ids = torch.tensor([[start] + [7 + i % (backbone.config.vocab_size - 7) for i in range(7)]], device=device)
    changed = ids.clone()
    changed[0, -1] = 7 + (int(ids[0, -1]) - 6) % (backbone.config.vocab_size - 7)
    backbone.attentions = (backbone.attention_kind, other)
    attention = Attention.named(other)
    try:
        with torch.no_grad():
            first, moved = (backbone(x, attention=attention)[0, 0] for x in (ids, changed))
            shorter = backbone(ids[:, :-1], attention=attention)[0, 0]
    except (TypeError, ValueError, RuntimeError):  # a model that takes no 4D mask
        backbone.attentions = (backbone.attention_kind,)
        return backbone.attentions
    gap = float((first - moved).abs().max())
    obeys = gap > PROBE_TOLERANCE if other == "bidirectional" else (
        gap <= PROBE_TOLERANCE and float((first - shorter).abs().max()) <= PROBE_TOLERANCE)
    backbone.attentions = (backbone.attention_kind, other) if obeys else (backbone.attention_kind,)
    return backbone.attentions


def open_huggingface(spec: str, device: str | torch.device = "cpu", *, trust_remote_code: bool = False) -> ModelSource:
    """A Hugging Face folder, or `hf:<id>[@revision]` from the hub (or its local cache)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer
    hub = spec.startswith(HUB_PREFIX)
    ref, revision = parse_hub(spec) if hub else (spec, None)
    try:
        config = AutoConfig.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code)
        hf_tokenizer = AutoTokenizer.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code)
    except OSError as err:
        if hub:
            raise _offline_hint(ref, err) from err
        raise ValueError(f"{spec} is not a loadable Hugging Face model folder ({err})") from err
    if not getattr(hf_tokenizer, "is_fast", False):
        raise ValueError(f"{spec}'s tokenizer is a slow (Python) one; armlm reads word boundaries and offsets from a fast "
                         "(tokenizers) tokenizer: save one with the model (tokenizer.json)")
    masked = _is_masked(config)
    auto = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    lm = auto.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code, dtype=torch.float32)
    backbone = HuggingFaceBackbone(lm.to(device), "bidirectional" if masked else "causal")
    backend = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    special = _special_tokens(hf_tokenizer, backend, masked, spec, int(getattr(text_config, "type_vocab_size", 1)) > 1)
    backbone.config = replace(backbone.config, max_len=_longest_input(hf_tokenizer, backbone.config.max_len))
    _probe(backbone, spec, special.start)
    switched_attention(backbone, special.start)
    name = type(lm).__name__
    reading = Reading(name, scoring="conditionals" if masked else "chain_rule", masked_conditionals=masked and
                      special.mask is not None, finetune_attention=backbone.attention_kind,
                      attentions=backbone.attentions, next_token_states=causal_next_token_states)
    return ModelSource(origin=spec, kind="huggingface", backbone=backbone, reading=reading, tokenizer=backend,
                       special=special, longest_input=backbone.config.max_len,
                       details={"model": backbone.config.to_dict(), "revision": revision,
                                "model_type": config.model_type})
