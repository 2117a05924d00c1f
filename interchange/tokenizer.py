"""armlm's tokenizer as a transformers `PreTrainedTokenizerFast`, adding the special tokens armlm adds.

armlm encodes a text for a language model as `[CLS] w_1 .. w_T` (pretraining blocks, diagnostics, generation) and,
for fine-tuning, as `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` with segment B of type 1
(datamodules.encoding). The exported tokenizer's post-processor adds the same, so `tokenizer(text)` gives the
ids armlm's model saw.

What clients read back:
- the class is saved as `PreTrainedTokenizerFast`, which every transformers from 4.x on loads (transformers 5
  writes `TokenizersBackend`, which 4.57, inside armlm's own `transformers>=4.56`, cannot);
- decoding puts a space before every word, the first included, and cleans up spaces before punctuation and
  clitics over the whole text (`clean_up_tokenization_spaces`): a pipeline that appends the decoded continuation
  to its prompt reads "the city of the capital", not "the city ofthe capital", and "band's", not "band ' s".
  The leading space is the GPT-2 convention: `decode` of a whole text begins with one.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

from armlm.common.vocabulary import CLS, EOD, MASK, PAD, SEP, UNK


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
    tokenizer.decoder = spaced_word_piece()
    names = ["input_ids", "token_type_ids", "attention_mask"] if with_token_types else ["input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token=UNK, cls_token=CLS, sep_token=SEP, pad_token=PAD, mask_token=MASK,
        bos_token=CLS, eos_token=EOD, model_max_length=model_max_length, padding_side="right",
        model_input_names=names, clean_up_tokenization_spaces=True,
    )


def spaced_word_piece() -> decoders.Decoder:
    """WordPiece decoding with a space before every word-initial piece (the first too) and `##` pieces joined."""
    return decoders.Sequence([decoders.Replace(Regex("^(?!##)"), " "), decoders.Replace(Regex("^##"), ""),
                              decoders.Fuse()])


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """save_pretrained, then name the class every transformers version loads (module docstring)."""
    tokenizer.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
