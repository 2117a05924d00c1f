"""Masked diffusion (MDLM): the rates, the corruption and the NELBO against a plain re-computation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.masked_diffusion import MaskedDiffusionLM, stratified_rates


def objective_with(vocab, **settings) -> MaskedDiffusionLM:
    objective = MaskedDiffusionLM(**settings)
    objective.set_vocabulary(vocab)
    return objective


def tiny_model_and_blocks(vocab, n_layers: int, shape: tuple[int, int]) -> tuple[Transformer, torch.Tensor]:
    """A seeded tiny backbone and random blocks of ordinary tokens, [CLS] first."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=vocab.size, max_len=32, d_model=16, n_layers=n_layers, n_heads=2,
                                    d_ff=32, dropout=0.0))
    ids = torch.randint(6, vocab.size, shape, generator=torch.Generator().manual_seed(2))
    ids[:, 0] = vocab.cls_id
    return model, ids


def padded(ids: torch.Tensor, vocab, lengths: dict[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids with row r padded from lengths[r] on, its attention mask)."""
    attention_mask = torch.ones_like(ids)
    for row, length in lengths.items():
        attention_mask[row, length:] = 0
    return ids.masked_fill(attention_mask == 0, vocab.pad_id), attention_mask


def plain_nll(model: Transformer, corrupted: torch.Tensor, ids: torch.Tensor, mask_id: int,
              attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) cross-entropy of the original tokens from full logits, [MASK]'s logit at -inf: the reference."""
    logits = model.logits(model(corrupted, attention=BIDIRECTIONAL, attention_mask=attention_mask)).float()
    logits[..., mask_id] = float("-inf")
    return F.cross_entropy(logits.transpose(1, 2), ids, reduction="none")


def test_rates_are_one_per_stratum_of_eps_to_one():
    rates = stratified_rates(64, 1e-3, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert ((rates > 1e-3) & (rates <= 1.0)).all()
    width = (1 - 1e-3) / 64
    strata = ((rates.sort().values - 1e-3) / width).floor().long()
    assert strata.tolist() == list(range(64))  # low discrepancy: every stratum of (eps, 1] gets one rate


def test_corruption_masks_targets_at_each_rows_rate_and_nothing_else(vocab):
    objective = objective_with(vocab)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(6, vocab.size, (256, 200), generator=g)
    ids[:, 0] = vocab.cls_id
    ids[:, 50] = vocab.eod_id
    attention_mask = torch.ones_like(ids)
    attention_mask[:, 180:] = 0  # padding
    corrupted, masked, rates = objective.corrupt({"input_ids": ids, "attention_mask": attention_mask}, g)
    assert not masked[:, 0].any() and not masked[:, 180:].any()  # [CLS] and padding never
    assert masked[:, 50].float().mean() > 0.3  # [EOD] is a target like any token
    assert (corrupted[masked] == vocab.mask_id).all() and (corrupted[~masked] == ids[~masked]).all()
    share = masked[:, 1:180].float().mean(1)
    assert (share - rates).abs().max() < 0.15  # 179 targets per row: within ~4 standard deviations
    assert torch.corrcoef(torch.stack([share, rates]))[0, 1] > 0.99


def test_loss_is_the_nelbo_with_mask_out_of_the_support(vocab):
    model, ids = tiny_model_and_blocks(vocab, n_layers=2, shape=(8, 24))
    objective = objective_with(vocab)
    batch = {"input_ids": ids}
    out = objective.loss(batch, model, torch.Generator().manual_seed(3))
    out.loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    corrupted, masked, rates = objective.corrupt(batch, torch.Generator().manual_seed(3))
    nll = plain_nll(model, corrupted, ids, vocab.mask_id)
    weighted = ((nll * masked) / rates[:, None]).sum() / (ids.shape[0] * (ids.shape[1] - 1))
    weighted.backward()
    torch.testing.assert_close(out.loss, weighted, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.lm_nll_sum, (nll * masked).sum().detach(), rtol=1e-5, atol=1e-5)
    assert int(out.predicted_tokens) == int(masked.sum())
    nelbo, count = out.extras["nelbo"]
    assert int(count) == 8 * 23 and torch.allclose(nelbo, weighted.detach())
    for mine, reference in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("eps", [0.0, 1.0, -0.1, "small", True])
def test_bad_eps_is_refused(eps):
    with pytest.raises(ValueError, match="objective.eps"):
        MaskedDiffusionLM(eps=eps)


def test_corrupting_before_the_vocabulary_is_known_says_so():
    with pytest.raises(RuntimeError, match="set_vocabulary"):
        MaskedDiffusionLM().corrupt({"input_ids": torch.zeros(2, 4, dtype=torch.long)})


def test_padding_is_never_a_target_and_the_loss_is_per_real_target(vocab):
    """Rows of different lengths: the NELBO is normalised by the real target positions only."""
    model, ids = tiny_model_and_blocks(vocab, n_layers=1, shape=(4, 12))
    objective = objective_with(vocab)
    ids, attention_mask = padded(ids, vocab, {1: 7, 3: 4})
    batch = {"input_ids": ids, "attention_mask": attention_mask}
    out = objective.loss(batch, model, torch.Generator().manual_seed(4))
    corrupted, masked, rates = objective.corrupt(batch, torch.Generator().manual_seed(4))
    assert not (masked & (attention_mask == 0)).any()
    n_targets = int(attention_mask[:, 1:].sum())
    assert int(out.extras["nelbo"][1]) == n_targets == 11 + 6 + 11 + 3
    nll = plain_nll(model, corrupted, ids, vocab.mask_id, attention_mask)
    expected = ((nll * masked) / rates[:, None]).sum() / n_targets
    torch.testing.assert_close(out.loss, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("copy_rate", [-0.1, 1.5, "some", True])
def test_bad_copy_rate_is_refused(copy_rate):
    with pytest.raises(ValueError, match="objective.copy_rate"):
        MaskedDiffusionLM(copy_rate=copy_rate)


def test_copy_positions_are_visible_targets_at_their_rate_and_leave_the_masking_alone(vocab):
    objective = objective_with(vocab, copy_rate=0.3)
    ids = torch.randint(6, vocab.size, (128, 100), generator=torch.Generator().manual_seed(5))
    ids[:, 0] = vocab.cls_id
    batch = {"input_ids": ids}
    g = torch.Generator().manual_seed(6)
    corrupted, masked, rates = objective.corrupt(batch, g)
    targets = torch.ones_like(masked)
    targets[:, 0] = False
    copied = objective.copy_positions(masked, targets, g)
    assert not (copied & masked).any() and not copied[:, 0].any()
    share = copied.sum() / (targets & ~masked).sum()
    assert abs(float(share) - 0.3) < 0.02  # ~6,300 visible targets, s.d. 0.006: ~3.5 standard deviations
    # The same generator draws the same masks with or without copying: validation's NELBO is unchanged by it.
    plain_masked = objective_with(vocab).corrupt(batch, torch.Generator().manual_seed(6))[1]
    assert torch.equal(masked, plain_masked)
    assert objective_with(vocab).copy_positions(masked, targets, g) is None


def test_copy_loss_is_added_to_the_nelbo_and_kept_out_of_the_bound(vocab):
    """Against full logits, with padding: copies fall on real visible targets only, weight 1, per target."""
    model, ids = tiny_model_and_blocks(vocab, n_layers=2, shape=(8, 24))
    objective = objective_with(vocab, copy_rate=0.5)
    ids, attention_mask = padded(ids, vocab, {2: 10, 5: 3})
    batch = {"input_ids": ids, "attention_mask": attention_mask}
    out = objective.loss(batch, model, torch.Generator().manual_seed(3))
    out.loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    g = torch.Generator().manual_seed(3)
    corrupted, masked, rates = objective.corrupt(batch, g)
    targets = attention_mask.bool()
    targets[:, 0] = False
    copied = objective.copy_positions(masked, targets, g)
    assert copied.any() and masked.any()
    nll = plain_nll(model, corrupted, ids, vocab.mask_id, attention_mask)
    n_targets = int(targets.sum())
    nelbo = ((nll * masked) / rates[:, None]).sum() / n_targets
    copy = (nll * copied).sum()
    expected = nelbo + copy / n_targets
    expected.backward()
    torch.testing.assert_close(out.loss, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.extras["nelbo"][0], nelbo.detach(), rtol=1e-5, atol=1e-6)  # the bound alone
    torch.testing.assert_close(out.lm_nll_sum, (nll * masked).sum().detach(), rtol=1e-5, atol=1e-5)
    assert int(out.predicted_tokens) == int(masked.sum())  # the copies are not predictions of the bound
    rows = int((masked | copied).sum())  # the copies' last MLP and vocabulary projection are compute spent
    assert out.forward_flops == model.forward_flops(corrupted, BIDIRECTIONAL, output_rows=rows, vocab_rows=rows)
    for mine, reference in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-6)
