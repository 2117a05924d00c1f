import pytest
import torch
import torch.nn.functional as F

from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.mlm_nsp import MaskedLMWithNSP
from tests.helpers.vocabularies import make_vocabulary


def test_loss_is_the_weighted_sum_of_mlm_and_nsp():
    vocab = make_vocabulary()
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=vocab.size, max_len=32, d_model=16, n_layers=1, n_heads=2,
                                    d_ff=32, dropout=0.0))
    objective = MaskedLMWithNSP(d_model=16, mlm_weight=0.5, nsp_weight=2.0, mask_rate=0.3)
    objective.set_vocabulary(vocab)
    objective.eval()
    batch = {
        "input_ids": torch.randint(6, vocab.size, (4, 20)),
        "token_type_ids": torch.tensor([[0] * 10 + [1] * 10] * 4),
        "attention_mask": torch.ones(4, 20, dtype=torch.long),
        "nsp_labels": torch.tensor([1, 0, 1, 0]),
    }
    out = objective.loss(batch, model, torch.Generator().manual_seed(1))
    mlm, nsp = out.extras["mlm_loss"][0], out.extras["nsp_loss"][0]
    torch.testing.assert_close(out.loss, 0.5 * mlm + 2.0 * nsp)
    torch.testing.assert_close(mlm, out.lm_nll_sum / out.predicted_tokens)
    corrupted, _ = objective.corrupt(batch["input_ids"], torch.Generator().manual_seed(1))
    hidden = model(corrupted, attention=BIDIRECTIONAL, attention_mask=batch["attention_mask"],
                   token_type_ids=batch["token_type_ids"])
    torch.testing.assert_close(nsp, F.cross_entropy(objective.nsp_head(hidden[:, 0]), batch["nsp_labels"]))
    assert 0.0 <= float(out.extras["nsp_acc"][0]) <= 1.0 and out.extras["nsp_acc"][1] == 4


def test_invalid_settings_are_rejected():
    with pytest.raises(ValueError, match="weights"):
        MaskedLMWithNSP(d_model=16, mlm_weight=0.0, nsp_weight=0.0)
    with pytest.raises(ValueError, match="sum to 1"):
        MaskedLMWithNSP(d_model=16, mask_prob=0.5)
    with pytest.raises(TypeError):
        MaskedLMWithNSP(d_model=16, mask_ratio=0.2)  # a misspelt setting is not silently ignored
