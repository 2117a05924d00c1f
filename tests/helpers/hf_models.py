"""Tiny random Hugging Face models of every family the installed transformers has, each with a tokenizer trained
here on a few sentences, saved to a folder and read back by path (no hub: HF_HUB_OFFLINE=1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

TEXT = [
    "The cat sat on the mat and looked at the dog.",
    "A dog was running in the park while the children played.",
    "Every student who passed the exam was happy with the result.",
    "These books about history were written by a famous author.",
    "She thinks that the teachers have not arrived yet.",
    "Who did the man see before he left the house?",
    "The weather was cold, so they stayed inside all day.",
    "Many people believe that music makes them feel better.",
] * 4
WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
SIZE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
POSITIONS = 64


def wordpiece() -> Tokenizer:
    """BERT's layout: lowercasing WordPiece, [CLS] x [SEP]."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(TEXT, trainers.WordPieceTrainer(vocab_size=160, special_tokens=WORDPIECE_SPECIALS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def byte_level(template: bool) -> Tokenizer:
    """GPT-2's byte-level BPE; `template`: RoBERTa's <s> x </s> around a text (GPT-2 adds nothing)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=BPE_SPECIALS,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if template:
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                          ("<s>", tok.token_to_id("<s>")), add_prefix_space=False)
    return tok


def _fast(tok: Tokenizer, **special: str):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=POSITIONS, **special)


def _bert_like(config_cls: str, model_cls: str, **extra) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        import transformers
        tok = _fast(wordpiece(), unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                    mask_token="[MASK]")
        config = getattr(transformers, config_cls)(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **extra)
        _save(getattr(transformers, model_cls)(config), tok, folder)
    return build


def _bpe_like(config_cls: str, model_cls: str, template: bool, mask: bool, **extra) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        import transformers
        special = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
        if mask:
            special["mask_token"] = "<mask>"
        tok = _fast(byte_level(template), **special)
        config = getattr(transformers, config_cls)(vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                                                   eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **extra)
        _save(getattr(transformers, model_cls)(config), tok, folder)
    return build


def _save(model, tokenizer, folder: Path) -> None:
    torch.manual_seed(0)
    model.apply(_reinit)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _reinit(module: torch.nn.Module) -> None:
    """Weights of std 0.3, so a random model's distributions are far from uniform and the oracles' sums differ
    from method to method."""
    if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
        torch.nn.init.normal_(module.weight, std=0.3)
        if getattr(module, "bias", None) is not None:
            torch.nn.init.normal_(module.bias, std=0.1)


FAMILIES: dict[str, Callable[[Path], None]] = {
    "bert": _bert_like("BertConfig", "BertForMaskedLM", max_position_embeddings=POSITIONS, **SIZE),
    "distilbert": _bert_like("DistilBertConfig", "DistilBertForMaskedLM", dim=32, n_layers=2, n_heads=2,
                             hidden_dim=64, max_position_embeddings=POSITIONS),
    "modernbert": _bert_like("ModernBertConfig", "ModernBertForMaskedLM", max_position_embeddings=POSITIONS,
                             global_attn_every_n_layers=1, bos_token_id=2, cls_token_id=2, eos_token_id=3,
                             sep_token_id=3, **SIZE),
    "roberta": _bpe_like("RobertaConfig", "RobertaForMaskedLM", template=True, mask=True,
                         max_position_embeddings=POSITIONS + 2, **SIZE),
    "gpt2": _bpe_like("GPT2Config", "GPT2LMHeadModel", template=False, mask=False, n_embd=32, n_layer=2, n_head=2,
                      n_positions=POSITIONS),
    "llama": _bpe_like("LlamaConfig", "LlamaForCausalLM", template=False, mask=False,
                       max_position_embeddings=POSITIONS, num_key_value_heads=1, **SIZE),
    "modernbert_decoder": _bpe_like("ModernBertDecoderConfig", "ModernBertDecoderForCausalLM", template=False,
                                    mask=False, max_position_embeddings=POSITIONS, global_attn_every_n_layers=1,
                                    cls_token_id=0, sep_token_id=2, **SIZE),
}
MASKED = ("bert", "distilbert", "modernbert", "roberta")
CAUSAL = ("gpt2", "llama", "modernbert_decoder")
