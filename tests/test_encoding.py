import pytest
import torch

from armlm.common.vocabulary import IGNORE_INDEX
from armlm.datamodules.encoding import encode_pair, encode_words, pad_batch, pad_id_of, truncate_longest_first
from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer

TEXT = "the cat sat on the mat while the dog ran to the park and back again"


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([TEXT * 10], TokenizerSettings(vocab_size=64, min_frequency=1))


def test_pairs_use_the_pretraining_layout(tokenizer):
    e = encode_pair(tokenizer, "the cat sat", "the dog ran", 1, max_length=64)
    a = tokenizer.encode("the cat sat", add_special_tokens=False).ids
    b = tokenizer.encode("the dog ran", add_special_tokens=False).ids
    assert e.input_ids == [2, *a, 3, *b, 3]  # [CLS]=2, [SEP]=3
    assert e.token_type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    single = encode_pair(tokenizer, "the cat sat", None, 0.5, max_length=64)
    assert single.input_ids == [2, *a, 3] and set(single.token_type_ids) == {0} and single.labels == 0.5


def test_truncation_is_longest_first_and_respects_max_length(tokenizer):
    assert truncate_longest_first([1] * 10, [2] * 3, 8) == ([1] * 5, [2] * 3)
    assert truncate_longest_first([1] * 5, [2] * 5, 6) == ([1] * 3, [2] * 3)
    e = encode_pair(tokenizer, TEXT, TEXT, 0, max_length=16)
    assert len(e.input_ids) == 16 and e.input_ids.count(3) == 2
    assert len(encode_pair(tokenizer, TEXT * 3, None, 0, max_length=16).input_ids) == 16


def test_words_carry_labels_on_their_first_subword(tokenizer):
    words = ["the", "cattle", "park"]  # "cattle" is not in the vocabulary; its letters are
    e = encode_words(tokenizer, words, [0, 1, 2], max_length=32)
    assert e.word_ids[0] is None and e.word_ids[-1] is None
    labelled = [label for label in e.labels if label != IGNORE_INDEX]
    assert labelled == [0, 1, 2] and len(e.input_ids) > len(words) + 2 and 1 not in e.input_ids  # 1 = [UNK]
    cut = encode_words(tokenizer, words, [0, 1, 2], max_length=4)
    assert len(cut.input_ids) == 4 and cut.input_ids[-1] == 3


def test_batches_pad_to_the_longest_example(tokenizer):
    pad = pad_id_of(tokenizer)
    batch = pad_batch([encode_pair(tokenizer, "the cat", None, 1, 64),
                       encode_pair(tokenizer, TEXT, "the dog", 0, 64)], pad)
    width = batch["input_ids"].shape[1]
    assert width == batch["attention_mask"][1].sum()
    assert (batch["input_ids"][0][batch["attention_mask"][0] == 0] == pad).all()
    assert batch["labels"].dtype == torch.long
    regression = pad_batch([encode_pair(tokenizer, "the cat", None, 3.5, 64)], pad)
    assert regression["labels"].dtype == torch.float32
    ner = pad_batch([encode_words(tokenizer, ["the"], [1], 16), encode_words(tokenizer, ["the", "park"], [0, 2], 16)], pad)
    assert ner["labels"].shape == ner["input_ids"].shape
    assert (ner["labels"][ner["attention_mask"] == 0] == IGNORE_INDEX).all()
