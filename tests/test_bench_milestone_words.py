"""bench/milestone_words: a token opens a whitespace word exactly where `str.split` starts one, and its ids are the
token cache's."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer

from armlm.datamodules.tokenizer import encode_documents
from bench.milestone_words import word_starts

DOCUMENTS = ["The cat's hat, (really) isn't  blue.", "", "naïve café-au-lait 3.14 e.g. U.S.A.\tend",
             "one", "  leading and trailing spaces  ", "Ünïcödé wörds ārē hērē; ok?"]


def test_word_opening_tokens_count_the_whitespace_words_and_carry_the_cached_ids(tokenizer_json):
    tokenizer = Tokenizer.from_str(tokenizer_json)
    ids, opens = word_starts(tokenizer, DOCUMENTS)
    cached, offsets = encode_documents(tokenizer, DOCUMENTS, progress=False)
    assert np.array_equal(ids, cached.astype(np.int64))
    assert opens.sum() == sum(len(text.split()) for text in DOCUMENTS)  # the oracle: BabyLM's word count
    # every document: as many word-opening tokens as words, and never on its [EOD]
    for text, start, end in zip([d for d in DOCUMENTS if d], offsets[:-1], offsets[1:], strict=True):
        assert opens[start:end].sum() == len(text.split()) and opens[end - 1] == 0
