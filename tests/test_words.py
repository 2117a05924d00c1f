"""datamodules.words: a token opens a whitespace word exactly where `str.split` starts one; the flags are kept beside
the split, checked against its cached ids; a block's words are the sum of its flags."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from armlm.common.errors import ArmlmError
from armlm.datamodules.tokenizer import encode_documents
from armlm.datamodules.words import WORD_STARTS, block_words, word_opening_tokens, word_starts

DOCUMENTS = ["The cat's hat, (really) isn't  blue.", "", "naïve café-au-lait 3.14 e.g. U.S.A.\tend",
             "one", "  leading and trailing spaces  ", "Ünïcödé wörds ārē hērē; ok?"]


def test_word_opening_tokens_count_the_whitespace_words_and_carry_the_cached_ids(tokenizer_json):
    tokenizer = Tokenizer.from_str(tokenizer_json)
    ids, opens = word_opening_tokens(tokenizer, DOCUMENTS)
    cached, offsets = encode_documents(tokenizer, DOCUMENTS, progress=False)
    assert np.array_equal(ids, cached.astype(np.int64))
    assert opens.sum() == sum(len(text.split()) for text in DOCUMENTS)  # the oracle: BabyLM's word count
    # every document: as many word-opening tokens as words, and never on its [EOD]
    for text, start, end in zip([d for d in DOCUMENTS if d], offsets[:-1], offsets[1:], strict=True):
        assert opens[start:end].sum() == len(text.split()) and opens[end - 1] == 0


def test_the_flags_are_kept_once_and_refused_against_another_corpus(tokenizer_json, tmp_path):
    tokenizer = Tokenizer.from_str(tokenizer_json)
    cached, _ = encode_documents(tokenizer, DOCUMENTS, progress=False)
    flags = word_starts(tmp_path, tokenizer, DOCUMENTS, cached)
    assert (tmp_path / WORD_STARTS).is_file() and int(np.sum(flags)) == sum(len(t.split()) for t in DOCUMENTS)
    assert np.array_equal(word_starts(tmp_path, tokenizer, iter(()), cached), flags)  # read back, nothing encoded
    (tmp_path / WORD_STARTS).unlink()
    with pytest.raises(ArmlmError, match="differs from the token cache"):
        word_starts(tmp_path, tokenizer, [*DOCUMENTS, "one more document"], cached)
    assert not (tmp_path / WORD_STARTS).exists()


def test_a_blocks_words_are_its_flags_and_the_tail_is_dropped():
    flags = np.array([1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1], dtype=np.uint8)
    assert block_words(flags, 3).tolist() == [2, 1, 3]  # blocks of 3 tokens; the last 2 fill no block
