import numpy as np
import pytest

from armlm.datamodules.blocks import PackedBlocks, SegmentPairs
from tests.helpers.vocabularies import make_vocabulary


def stream(doc_lengths, seed=0):
    """Documents of distinct ordinary tokens, each followed by [EOD] (id 5), as the token cache stores them."""
    rng = np.random.default_rng(seed)
    docs = [np.append(rng.integers(6, 50, n), 5) for n in doc_lengths]
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    return np.concatenate(docs).astype(np.uint16), offsets


def test_packed_blocks_are_cls_plus_contiguous_stream():
    vocab = make_vocabulary()
    tokens, _ = stream([30, 50, 20])
    blocks = PackedBlocks(tokens, 16, vocab)
    assert len(blocks) == len(tokens) // 15
    for i in range(len(blocks)):
        ids = blocks[i]["input_ids"].numpy()
        assert ids[0] == vocab.cls_id and len(ids) == 16
        assert np.array_equal(ids[1:], tokens[i * 15 : (i + 1) * 15])


def test_nsp_pairs_are_balanced_and_negatives_come_from_other_documents():
    vocab = make_vocabulary()
    tokens, offsets = stream([40, 80, 25, 60, 120, 33, 70, 9])
    pairs = SegmentPairs(tokens, offsets, 32, vocab, seed=1)
    draws = [pairs.pair(i) for i in range(4000)]
    positives = [p for p in draws if p.is_next]
    assert abs(len(positives) / len(draws) - 0.5) < 5 * np.sqrt(0.25 / len(draws))
    for p in draws:
        assert len(p.a) >= 1 and len(p.b) >= 1 and len(p.a) + len(p.b) <= 29
        assert 5 not in p.a and 5 not in p.b  # never crosses a document end
        if p.is_next:
            assert p.doc_a == p.doc_b
        else:
            assert p.doc_a != p.doc_b
    # A positive B is exactly the tokens that follow A in the document.
    p = positives[0]
    joined = np.concatenate([p.a, p.b])
    windows = np.lib.stride_tricks.sliding_window_view(tokens, len(joined))
    assert (windows == joined).all(axis=1).any()


def test_nsp_example_layout_and_determinism():
    vocab = make_vocabulary()
    tokens, offsets = stream([40, 80, 25])
    pairs = SegmentPairs(tokens, offsets, 32, vocab, seed=1)
    item, again = pairs[7], pairs[7]
    p = pairs.pair(7)
    n_a, n_b = len(p.a), len(p.b)
    ids = item["input_ids"].numpy()
    assert ids[0] == vocab.cls_id and ids[1 + n_a] == vocab.sep_id and ids[2 + n_a + n_b] == vocab.sep_id
    assert (ids[3 + n_a + n_b :] == vocab.pad_id).all()
    assert item["token_type_ids"].tolist() == [0] * (2 + n_a) + [1] * (n_b + 1) + [0] * (29 - n_a - n_b)
    assert item["attention_mask"].sum() == 3 + n_a + n_b
    assert int(item["nsp_labels"]) == int(p.is_next)
    assert all(np.array_equal(item[k], again[k]) for k in item)


def test_nsp_needs_two_documents():
    tokens, offsets = stream([40])
    with pytest.raises(ValueError, match="at least 2 documents"):
        SegmentPairs(tokens, offsets, 32, make_vocabulary())
