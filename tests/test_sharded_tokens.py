import numpy as np
import pytest

from armlm.datamodules.sharded_tokens import ShardedTokens


def test_sharded_tokens_behave_like_an_array():
    parts = [np.arange(0, 5, dtype=np.uint16), np.arange(5, 5, dtype=np.uint16), np.arange(5, 12, dtype=np.uint16)]
    stream = ShardedTokens(parts)
    flat = np.arange(12)
    assert len(stream) == 12 and stream.shape == (12,)
    for start in range(12):
        for stop in range(start, 13):
            assert np.array_equal(stream[start:stop], flat[start:stop])
    assert stream[-1] == 11 and stream[7] == 7 and stream[np.uint64(7)] == 7 and stream[np.int32(-1)] == 11
    for bad in (12, -13):
        with pytest.raises(IndexError):
            stream[bad]
    with pytest.raises(IndexError):
        stream.read(-2, 3)
    with pytest.raises(TypeError):
        stream[1.5]
    assert len(stream.head(6)) == 6 and len(stream.head(100)) == 12


def test_counts_reads_and_heads_across_shards_match_one_flat_array():
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 50, size=n).astype(np.uint16) for n in (17, 0, 1, 40, 9)]
    flat = np.concatenate(parts)
    stream = ShardedTokens(parts)
    assert np.array_equal(stream.bincount(50), np.bincount(flat, minlength=50))
    assert np.array_equal(np.asarray(stream), flat) and np.asarray(stream, dtype=np.int64).dtype == np.int64
    for n in (0, 1, 17, 18, 40, len(flat)):
        assert np.array_equal(np.asarray(stream.head(n)), flat[:n])
    with pytest.raises(ValueError, match="step 1"):
        stream[::2]
