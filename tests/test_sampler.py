"""The training sampler: one seeded order per epoch, and a resumed epoch that continues where it stopped."""

from __future__ import annotations

import pytest

from armlm.datamodules.sampler import ResumableSampler


def epoch_order(sampler: ResumableSampler, epoch: int) -> list[int]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_resume_at_continues_that_epoch_and_leaves_the_others_whole():
    data = list(range(40))
    plain = ResumableSampler(data, num_replicas=1, rank=0, seed=5)
    full = [epoch_order(plain, e) for e in range(3)]
    assert full[0] != full[1] and sorted(full[1]) == data

    resumed = ResumableSampler(data, num_replicas=1, rank=0, seed=5)
    resumed.resume_at(1, 12)
    assert len(resumed) == 40  # Lightning counts the restored batch index against the full epoch
    assert epoch_order(resumed, 1) == full[1][12:]
    assert epoch_order(resumed, 1) == full[1][12:]  # a second iterator of the same epoch (Lightning makes two)
    assert epoch_order(resumed, 2) == full[2]
    assert epoch_order(resumed, 1) == full[1]  # once past it, the resume point is forgotten


def test_ranks_resume_at_the_same_global_position():
    """Skipping n examples per rank on 2 ranks skips the first 2n of the one-process order."""
    data = list(range(48))
    single = epoch_order(ResumableSampler(data, num_replicas=1, rank=0, seed=1), 0)
    ranks = []
    for rank in range(2):
        sampler = ResumableSampler(data, num_replicas=2, rank=rank, seed=1)
        sampler.resume_at(0, 6)
        ranks.append(epoch_order(sampler, 0))
    assert sorted(ranks[0] + ranks[1]) == sorted(single[12:])


def test_a_negative_position_is_refused():
    with pytest.raises(ValueError, match="examples_done=-1"):
        ResumableSampler(list(range(4)), num_replicas=1, rank=0, seed=0).resume_at(0, -1)
