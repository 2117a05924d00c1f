"""Objectives mixed by rows within a step (objectives.mixture) and GPT-BERT as published (objectives.hybrid)."""

import pytest
import torch

from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.hybrid import HybridLM
from armlm.objectives.masked_next_token import MaskedNextTokenLM
from armlm.objectives.mixture import RowMixture, apportion
from armlm.objectives.mlm import MaskedLM
from armlm.objectives.mlm_nsp import MaskedLMWithNSP
from tests.helpers.objectives import blocks, mixture


def backbone(vocab):
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=vocab.size, max_len=32, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                   dropout=0.0, positions="rope")).eval()


@pytest.mark.parametrize("weights,rows,expected", [([15, 1], 32, [30, 2]), ([0.5, 0.5], 7, [4, 3]),
                                                   ([1, 1, 1], 8, [3, 3, 2]), ([15, 1], 8, [7, 1]),
                                                   ([15, 1], 2, [1, 1]), ([15, 1], 1, [1, 0])])
def test_rows_are_apportioned_by_largest_remainder(weights, rows, expected):
    assert apportion(weights, rows) == expected


def test_the_loss_is_the_weighted_combination_of_each_objectives_loss_on_its_rows(vocab):
    model, ids = backbone(vocab), blocks(vocab)
    objective = mixture(vocab, masked=(0.75, MaskedLM(mask_rate=0.3)), causal=(0.25, AutoregressiveLM()))
    out = objective.loss({"input_ids": ids}, model, torch.Generator().manual_seed(7))
    # rows 0-5 masked, 6-7 causal; the generator is read by the masked rows first, as in the mixture
    mlm = MaskedLM(mask_rate=0.3)
    mlm.set_vocabulary(vocab)
    masked = mlm.loss({"input_ids": ids[:6]}, model, torch.Generator().manual_seed(7))
    causal = AutoregressiveLM().loss({"input_ids": ids[6:]}, model)
    torch.testing.assert_close(out.loss, 0.75 * masked.loss + 0.25 * causal.loss)
    torch.testing.assert_close(out.lm_nll_sum, masked.lm_nll_sum + causal.lm_nll_sum)
    assert int(out.predicted_tokens) == int(masked.predicted_tokens) + int(causal.predicted_tokens)
    assert out.forward_flops == pytest.approx(masked.forward_flops + causal.forward_flops)
    torch.testing.assert_close(out.extras["loss_causal"][0], causal.loss)
    assert set(out.extras) <= set(objective.extra_metrics)
    # [MASK] over every row's inputs: the masked rows' [MASK]s, the causal rows' tokens counted, none masked
    share, inputs = out.extras["mask_share"]
    n_masked = masked.extras["mask_share"][0] * masked.extras["mask_share"][1]
    assert int(inputs) == ids.numel() and float(n_masked) > 0
    torch.testing.assert_close(share, n_masked / ids.numel())


def test_a_component_without_rows_drops_out_and_the_weights_renormalise(vocab):
    model, ids = backbone(vocab), blocks(vocab, rows=1)
    objective = mixture(vocab, masked=(15 / 16, MaskedLM(mask_rate=0.3)), causal=(1 / 16, AutoregressiveLM()))
    out = objective.loss({"input_ids": ids}, model, torch.Generator().manual_seed(2))
    mlm = MaskedLM(mask_rate=0.3)
    mlm.set_vocabulary(vocab)
    torch.testing.assert_close(out.loss, mlm.loss({"input_ids": ids}, model, torch.Generator().manual_seed(2)).loss)
    assert "loss_causal" not in out.extras


def test_gpt_bert_mixes_masked_next_token_and_causal_rows_15_to_1(vocab):
    model, ids = backbone(vocab), blocks(vocab, rows=32)
    objective = mixture(vocab, HybridLM, masked=(15 / 16, MaskedNextTokenLM(mask_rate=0.15)),
                        causal=(1 / 16, AutoregressiveLM()))
    assert objective.row_counts(32) == {"masked": 30, "causal": 2}
    out = objective.loss({"input_ids": ids}, model, torch.Generator().manual_seed(3))
    causal = AutoregressiveLM().loss({"input_ids": ids[30:]}, model)
    torch.testing.assert_close(out.extras["loss_causal"][0], causal.loss)
    assert HybridLM.downstream({"components": {}}) is HybridLM and HybridLM.masked_prediction_offset == 1


def test_a_generic_mixture_answers_as_the_component_it_names(vocab):
    config = {"_target_": "armlm.objectives.mixture.RowMixture", "answers_as": "causal",
              "components": {"masked": {"weight": 0.5, "objective": {"_target_": "armlm.objectives.mlm.MaskedLM"}},
                             "causal": {"weight": 0.5, "objective": {"_target_": "armlm.objectives.ar.AutoregressiveLM"}}}}
    assert RowMixture.downstream(config) is AutoregressiveLM
    objective = mixture(vocab, causal=(0.5, AutoregressiveLM()), masked=(0.5, MaskedLM()))
    assert objective.finetune_attention == "causal" and objective.val_loss_kind == "mixture"


def test_bad_mixtures_are_refused(vocab):
    with pytest.raises(ValueError, match="answers_as"):
        RowMixture({"a": {"weight": 1.0, "objective": AutoregressiveLM()}})
    with pytest.raises(ValueError, match="not a component"):
        RowMixture({"a": {"weight": 1.0, "objective": AutoregressiveLM()}}, answers_as="b")
    with pytest.raises(ValueError, match="weight"):
        RowMixture({"a": {"weight": 0.0, "objective": AutoregressiveLM()}}, answers_as="a")
    with pytest.raises(ValueError, match="input"):  # blocks and segment pairs cannot share a batch
        RowMixture({"a": {"weight": 0.5, "objective": AutoregressiveLM()},
                    "b": {"weight": 0.5, "objective": MaskedLMWithNSP(d_model=16)}}, answers_as="a")
    with pytest.raises(ValueError, match="masked next-token"):  # GPT-BERT needs its two kinds of rows
        HybridLM({"a": {"weight": 0.5, "objective": MaskedLM()}, "b": {"weight": 0.5, "objective": AutoregressiveLM()}})


def test_a_mixture_whose_components_insert_no_mask_logs_no_share(vocab):
    objective = mixture(vocab, left=(0.5, AutoregressiveLM()), right=(0.5, AutoregressiveLM()))
    out = objective.loss({"input_ids": blocks(vocab)}, backbone(vocab))
    assert "mask_share" not in objective.extra_metrics and "mask_share" not in out.extras
