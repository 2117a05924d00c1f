"""armlm's tokenizer as a transformers `PreTrainedTokenizerFast`, adding the special tokens armlm adds.

armlm encodes a text for a language model as `[CLS] w_1 .. w_T` (pretraining blocks, diagnostics, generation) and,
for fine-tuning, as `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` with segment B of type 1
(datamodules.encoding). The exported tokenizer's post-processor adds the same, so `tokenizer(text)` gives the
ids armlm's model saw.
"""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

from common.vocabulary import CLS, EOD, MASK, PAD, SEP, UNK


def exported_tokenizer(tokenizer_json: str, *, finetuned: bool, model_max_length: int,
                       with_token_types: bool = True) -> PreTrainedTokenizerFast:
    """`finetuned`: a task model's `[CLS] A [SEP]` inputs, else a language model's `[CLS] A`. Without
    `with_token_types` it returns no token_type_ids: a causal LM only ever saw type 0, and GPT-2 would read them as
    token embeddings."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    ids = {token: tokenizer.token_to_id(token) for token in (CLS, SEP)}
    single = f"{CLS} $A {SEP}" if finetuned else f"{CLS} $A"
    # Segment pairs: fine-tuning's, and MLM+NSP's pretraining inputs, end each segment with [SEP].
    pair = f"{CLS} $A {SEP} $B:1 {SEP}:1"
    tokenizer.post_processor = TemplateProcessing(single=single, pair=pair, special_tokens=list(ids.items()))
    names = ["input_ids", "token_type_ids", "attention_mask"] if with_token_types else ["input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token=UNK, cls_token=CLS, sep_token=SEP, pad_token=PAD, mask_token=MASK,
        bos_token=CLS, eos_token=EOD, model_max_length=model_max_length, padding_side="right",
        model_input_names=names,
    )
