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

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from armlm.common.errors import ArmlmError
from armlm.sources.base import ModelSource, Reading, SpecialTokens, causal_next_token_states
from armlm.sources.hf_backbone import HuggingFaceBackbone, probe_head, switched_attention

HUB_PREFIX = "hf:"
# config.json's model_type in a folder armlm exported with its own modelling file (interchange/modeling_armlm.py's
# ArmlmConfig, which runs in transformers without armlm installed and so cannot import this)
ARMLM_REMOTE_MODEL_TYPE = "armlm"
UNSET_MAX_LENGTH = 1_000_000  # transformers writes ~1e30 where a tokenizer has no model_max_length


def parse_hub(spec: str) -> tuple[str, str | None]:
    """`hf:<id>[@revision]` -> (id, revision)."""
    ref = spec[len(HUB_PREFIX):]
    name, _, revision = ref.partition("@")
    if not name:
        raise ArmlmError(f"checkpoint={spec!r} names no model; give hf:<hub id>[@revision], e.g. hf:bert-base-cased")
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
            raise ArmlmError(f"{config.model_type!r} models have neither a masked-LM nor a causal-LM class in "
                             "transformers; armlm reads those two kinds")
        return False
    return not getattr(config, "is_decoder", False)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as the environment says now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")


def _offline_hint(ref: str, err: Exception) -> ArmlmError:
    why = "HF_HUB_OFFLINE is set" if hub_offline() else "the hub cannot be reached"
    return ArmlmError(f"hf:{ref} cannot be loaded: {why} and it is not in the local cache ({type(err).__name__}). Where "
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
        raise ArmlmError(f"{origin}'s tokenizer has no start token (BOS, CLS or EOS) to begin a text with; a text's "
                         "first token would have nothing to be predicted from")
    between, second_type = _pair_template(backend, segment_types)
    sep, eos = hf_tokenizer.sep_token_id, hf_tokenizer.eos_token_id
    document_end = sep if masked and sep is not None else eos  # an id of 0 is an id
    return SpecialTokens(start=start, end=suffix if masked else (), mask=hf_tokenizer.mask_token_id,
                         pad=hf_tokenizer.pad_token_id, document_end=document_end,
                         specials=tuple(sorted(set(hf_tokenizer.all_special_ids) | {start})),
                         unknown=hf_tokenizer.unk_token_id, task_end=suffix,
                         task_between=between, second_type=second_type, word_prefix=_word_prefix(backend))


def _longest_input(hf_tokenizer: Any, positions: int) -> int:
    """The tokenizer's model_max_length where it sets one (RoBERTa's 512 of 514 position rows), else the config's."""
    declared = int(hf_tokenizer.model_max_length or 0)
    return min(declared, positions) if 0 < declared < UNSET_MAX_LENGTH else positions


def _declared_model_type(ref: str, revision: str | None) -> str | None:
    """config.json's model_type, in a folder or on the hub, read without running any code shipped beside it; None
    where it cannot be read (loading it then says why)."""
    from transformers import PretrainedConfig
    try:
        declared, _ = PretrainedConfig.get_config_dict(ref, revision=revision, local_files_only=hub_offline())
    except (OSError, ValueError):
        return None
    return declared.get("model_type")


def open_huggingface(spec: str, device: str | torch.device = "cpu", *, trust_remote_code: bool = False) -> ModelSource:
    """A Hugging Face folder, or `hf:<id>[@revision]` from the hub (or its local cache)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer
    hub = spec.startswith(HUB_PREFIX)
    ref, revision = parse_hub(spec) if hub else (spec, None)
    where = {"revision": revision, "trust_remote_code": trust_remote_code, "local_files_only": hub_offline()}
    if _declared_model_type(ref, revision) == ARMLM_REMOTE_MODEL_TYPE:
        raise ArmlmError(f"{spec} is a model armlm exported with its own modelling file, whose base model is armlm's "
                         "Backbone, not a transformers one: give the armlm checkpoint it came from (its README.md "
                         "names it)")
    try:
        config = AutoConfig.from_pretrained(ref, **where)
        hf_tokenizer = AutoTokenizer.from_pretrained(ref, **where)
    except OSError as err:
        if hub:
            raise _offline_hint(ref, err) from err
        raise ArmlmError(f"{spec} is not a loadable Hugging Face model folder ({err})") from err
    except ValueError as err:  # transformers' refusal to run a folder's own code unasked names the argument
        if trust_remote_code or "trust_remote_code" not in str(err):
            raise
        raise ArmlmError(f"{spec} ships its own modelling code (config.json's auto_map), which runs only when asked: "
                         "add trust_remote_code=true if you trust it") from err
    if not getattr(hf_tokenizer, "is_fast", False):
        raise ArmlmError(f"{spec}'s tokenizer is a slow (Python) one; armlm reads word boundaries and offsets from a fast "
                         "(tokenizers) tokenizer: save one with the model (tokenizer.json)")
    masked = _is_masked(config)
    auto = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    lm = auto.from_pretrained(ref, dtype=torch.float32, **where)
    backbone = HuggingFaceBackbone(lm.to(device), "bidirectional" if masked else "causal")
    backend = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    special = _special_tokens(hf_tokenizer, backend, masked, spec, int(getattr(text_config, "type_vocab_size", 1)) > 1)
    backbone.config = replace(backbone.config, max_len=_longest_input(hf_tokenizer, backbone.config.max_len))
    probe_head(backbone, spec, special.start)
    switched_attention(backbone, special.start)
    name = type(lm).__name__
    reading = Reading(name, scoring="conditionals" if masked else "chain_rule", masked_conditionals=masked and
                      special.mask is not None, finetune_attention=backbone.attention_kind,
                      attentions=backbone.attentions, next_token_states=causal_next_token_states)
    return ModelSource(origin=spec, kind="huggingface", backbone=backbone, reading=reading, tokenizer=backend,
                       special=special, longest_input=backbone.config.max_len,
                       details={"model": backbone.config.to_dict(), "revision": revision,
                                "model_type": config.model_type})
