"""Type-level pooling: equal to the mean of contextual vectors computed one occurrence at a time."""

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer
from armlm.embeddings.contextual import segments, type_vectors
from armlm.models.attention import Attention
from armlm.models.backbone import ModelConfig, Transformer

DOCUMENTS = ["the quick brown fox jumps over the lazy dog", "a lazy afternoon with the brown dog",
             "foxes and dogs are quick animals", "the dog sleeps"] * 5


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(DOCUMENTS, TokenizerSettings(vocab_size=60, min_frequency=1))


def model(vocab: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=vocab, max_len=32, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                   dropout=0.0)).eval()


def one_by_one(backbone, tokenizer, sentences, word, max_contexts, attention):
    """The slow oracle: each occurrence's sentence run alone, its subwords averaged, then the occurrences."""
    vectors = []
    for sentence in sentences:
        encoding = tokenizer.encode(sentence, is_pretokenized=True, add_special_tokens=False)
        ids = [tokenizer.token_to_id("[CLS]"), *encoding.ids, tokenizer.token_to_id("[SEP]")]
        with torch.no_grad():
            states = backbone.layer_states(torch.tensor([ids]), attention=attention, with_embeddings=True)
        for k, w in enumerate(sentence):
            if w == word and len(vectors) < max_contexts:
                positions = [1 + p for p, owner in enumerate(encoding.word_ids) if owner == k]
                vectors.append(torch.stack([layer[0, positions].mean(0) for layer in states]))
    return torch.stack(vectors).mean(0).double().numpy()


@pytest.mark.parametrize("kind", ["bidirectional", "causal"])
def test_pooling_equals_the_mean_of_vectors_computed_one_by_one(tokenizer, kind):
    sentences = [d.split() for d in DOCUMENTS[:4]] + [["quick", "foxes", "jumps"]]
    words = ["the", "dog", "foxes", "quick"]
    assert len(tokenizer.encode("foxes").ids) > 1  # a word of several subwords is pooled too
    backbone = model(tokenizer.get_vocab_size())
    attention = Attention.named(kind)
    pooled = type_vectors(backbone, attention, tokenizer, sentences, words, max_contexts=2, max_length=32,
                          batch_size=3)
    assert pooled.shape == (3, 4, 16)
    for row, word in enumerate(words):
        assert np.allclose(pooled[:, row], one_by_one(backbone, tokenizer, sentences, word, 2, attention), atol=1e-5)


def test_long_lines_are_cut_at_word_boundaries_and_unseen_words_are_nan(tokenizer):
    sentence = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]
    pieces = segments(tokenizer, [sentence], ["the", "dog"], max_contexts=5, max_length=8)
    assert all(len(p.ids) <= 8 for p in pieces) and len(pieces) >= 2
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    assert all(p.ids[0] == cls_id and p.ids[-1] == sep_id for p in pieces)
    assert sum(t >= 0 for p in pieces for t in p.token_word) >= 3  # the, the, dog
    pooled = type_vectors(model(tokenizer.get_vocab_size()), Attention.named("bidirectional"), tokenizer, [sentence],
                          ["the", "zebra"], max_contexts=5, max_length=32)
    assert np.isnan(pooled[:, 1]).all() and not np.isnan(pooled[:, 0]).any()


def test_pooling_over_cut_lines_equals_the_oracle_run_on_each_piece(tokenizer):
    """At 8 positions the line is cut in pieces; each occurrence's context is its own piece, as the oracle runs it."""
    sentence = "the quick brown fox jumps over the lazy dog".split()
    backbone, attention = model(tokenizer.get_vocab_size()), Attention.named("bidirectional")
    words = sorted(set(sentence))  # every word wanted: no piece is dropped, so the pieces tile the line
    pieces = segments(tokenizer, [sentence], words, max_contexts=5, max_length=8)
    assert len(pieces) >= 2
    # The pieces hold whole words, in order: rebuild each piece's words from its token count.
    encoding = tokenizer.encode(sentence, is_pretokenized=True, add_special_tokens=False)
    sizes = [encoding.word_ids.count(k) for k in range(len(sentence))]
    words_of_pieces, start = [], 0
    for piece in pieces:
        taken, tokens = [], 0
        while start < len(sentence) and tokens + sizes[start] <= len(piece.ids) - 2:
            tokens += sizes[start]
            taken.append(sentence[start])
            start += 1
        words_of_pieces.append(taken)
    assert start == len(sentence) and sum(map(len, words_of_pieces)) == len(sentence)
    pooled = type_vectors(backbone, attention, tokenizer, [sentence], words, max_contexts=5, max_length=8)
    for row, word in enumerate(words):
        expected = one_by_one(backbone, tokenizer, words_of_pieces, word, 5, attention)
        assert np.allclose(pooled[:, row], expected, atol=1e-5)


class CountingTokenizer:
    """The tokenizer, counting the lines it encodes."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer, self.lines = tokenizer, 0

    def encode(self, *args, **kwargs):
        self.lines += 1
        return self.tokenizer.encode(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.tokenizer, name)


def test_a_line_holding_no_occurrence_still_wanted_is_not_encoded_and_the_pieces_are_the_same(tokenizer):
    """Only lines with an occurrence still wanted give pieces: the others are not tokenized, and the reading stops
    once every word has its contexts (at max_contexts=2 a whole corpus was read to fill the first lines)."""
    wanted = [["the", "dog", "sleeps"], ["the", "lazy", "dog"]]
    others = [["a", "lazy", "afternoon"], ["the", "quick", "dog"], ["foxes", "and", "dogs"]]  # none, then filled
    corpus = [wanted[0], others[0], wanted[1], others[1], others[2]]

    def lines_then_the_rest():  # the rest of a long corpus: not read once every word has its contexts
        yield from corpus
        raise AssertionError("read past the line where every word had its contexts")

    counting = CountingTokenizer(tokenizer)
    pieces = segments(counting, lines_then_the_rest(), ["the", "dog"], max_contexts=2, max_length=32)
    assert pieces == segments(tokenizer, wanted, ["the", "dog"], max_contexts=2, max_length=32)
    assert counting.lines == 2 and sum(t >= 0 for p in pieces for t in p.token_word) == 4
