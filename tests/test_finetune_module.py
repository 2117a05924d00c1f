"""The fine-tuning module: pooling, attention modes, frozen features, word-level predictions, losses."""

import pytest
import torch

from armlm.common.vocabulary import IGNORE_INDEX
from armlm.datamodules.conll import CONLL2003_TAGS
from armlm.finetune.module import FinetuneModule, metric_tag
from armlm.finetune.static import StaticTagger
from armlm.models.heads import ScalarMix, pool

TINY = {"vocab_size": 40, "max_len": 32, "d_model": 16, "n_layers": 3, "n_heads": 2, "d_ff": 32, "dropout": 0.0}
OPTIM = {"lr": 1e-2, "weight_decay": 0.0, "warmup_ratio": 0.0, "betas": [0.9, 0.999], "eps": 1e-8}
RTE = {"name": "rte", "kind": "classification", "labels": ["entailment", "not_entailment"], "eval_splits": ["dev"]}
STSB = {"name": "stsb", "kind": "regression", "labels": [], "eval_splits": ["dev"]}
NER = {"name": "conll2003", "kind": "tagging", "labels": list(CONLL2003_TAGS), "eval_splits": ["validation"]}


def module(task=RTE, mode="full", causal=False, pooling="first") -> FinetuneModule:
    torch.manual_seed(0)
    settings = {"mode": mode, "attention": "causal" if causal else "bidirectional", "pooling": pooling,
                "head_dropout": 0.0, "feature_layers": 4}
    return FinetuneModule(TINY, task, settings, OPTIM).eval()


def batch(ids: list[list[int]], labels) -> dict[str, torch.Tensor]:
    width = max(map(len, ids))
    return {"input_ids": torch.tensor([r + [0] * (width - len(r)) for r in ids]),
            "token_type_ids": torch.zeros(len(ids), width, dtype=torch.long),
            "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids]),
            "labels": torch.as_tensor(labels)}


def test_pooling_picks_first_last_non_pad_and_mean():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    assert torch.equal(pool(hidden, mask, "first"), hidden[:, 0])
    assert torch.equal(pool(hidden, mask, "last"), torch.stack([hidden[0, 3], hidden[1, 1]]))
    assert torch.allclose(pool(hidden, mask, "mean"), torch.stack([hidden[0].mean(0), hidden[1, :2].mean(0)]))
    with pytest.raises(ValueError, match="pooling 'max'"):
        pool(hidden, mask, "max")


@pytest.mark.parametrize("mode", ["full", "features"])
def test_causal_tagging_ignores_later_tokens_and_bidirectional_does_not(mode):
    ids = [[2, 7, 8, 9, 10, 11, 3]]
    changed = [[2, 7, 8, 9, 30, 31, 3]]  # tokens from position 4 on differ
    for causal in (True, False):
        m = module(NER, mode, causal)
        before, after = m(batch(ids, [[0] * 7])), m(batch(changed, [[0] * 7]))
        same_prefix = torch.allclose(before[:, :4], after[:, :4], atol=1e-5)
        assert same_prefix == causal


def test_causal_last_pooling_sees_the_whole_input_and_padding_is_invisible():
    m = module(RTE, causal=True, pooling="last")
    one = m(batch([[2, 7, 8, 3]], [0]))
    padded = m(batch([[2, 7, 8, 3], [2, 5, 5, 5, 5, 5, 3]], [0, 1]))[:1]
    assert torch.allclose(one, padded, atol=1e-5)  # right padding changes nothing
    assert not torch.allclose(one, m(batch([[2, 9, 8, 3]], [0])), atol=1e-5)  # an early token matters


def test_causal_first_token_pooling_is_refused():
    with pytest.raises(ValueError, match="pooling=first with causal attention"):
        module(RTE, causal=True, pooling="first")
    with pytest.raises(ValueError, match="finetune.mode='frozen'"):
        module(RTE, mode="frozen")


def test_feature_mode_trains_the_head_only():
    m = module(RTE, mode="features").train()
    assert not m.backbone.training and m.head.training  # frozen features: no dropout in the backbone
    frozen = {k: v.clone() for k, v in m.backbone.state_dict().items()}
    head = {k: v.clone() for k, v in m.head.state_dict().items()}
    optimizer = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    b = batch([[2, 7, 8, 3], [2, 9, 3]], [0, 1])
    m.loss(m(b), b["labels"]).backward()
    optimizer.step()
    assert all(torch.equal(frozen[k], v) for k, v in m.backbone.state_dict().items())
    assert any(not torch.equal(head[k], v) for k, v in m.head.state_dict().items())
    assert all(p.grad is None for p in m.backbone.parameters())


def test_feature_based_ner_reads_the_last_four_layers_concatenated():
    m = module(NER, mode="features")
    assert m.n_feature_layers == 3  # the tiny backbone has 3 layers: all of them
    assert m.head.net[1].in_features == 3 * TINY["d_model"]
    assert module(NER, mode="full").head.net[-1].in_features == TINY["d_model"]


def test_regression_uses_mse_and_classification_cross_entropy():
    m = module(STSB)
    b = batch([[2, 7, 3], [2, 8, 3]], [1.5, 4.0])
    out = m(b)
    assert out.shape == (2, 1)
    assert torch.allclose(m.loss(out, b["labels"]), ((out.squeeze(-1) - b["labels"]) ** 2).mean())
    m = module(RTE)
    logits = m(batch([[2, 7, 3]], [1]))
    assert torch.allclose(m.loss(logits, torch.tensor([1])), -logits.log_softmax(-1)[0, 1])


def test_word_predictions_come_from_first_subwords_and_cut_words_count_as_o():
    m = module(NER)
    logits = torch.full((1, 5, len(CONLL2003_TAGS)), -10.0)
    for position, tag in enumerate([0, 1, 2, 5, 0]):  # [CLS] B-PER I-PER(2nd subword) B-LOC [SEP]
        logits[0, position, tag] = 10.0
    b = {"word_positions": torch.tensor([[1, 3, -1, -1]]), "word_labels": torch.tensor([[1, 5, 3, IGNORE_INDEX]])}
    predicted, gold = m.predictions(logits, b)
    assert predicted.tolist() == [[1, 5, 0, 0]] and gold.tolist() == [[1, 5, 3, IGNORE_INDEX]]


def test_metric_tags():
    assert metric_tag("rte", "dev", "accuracy") == "rte/val/accuracy"
    assert metric_tag("mnli", "dev_mismatched", "accuracy") == "mnli/val/accuracy_mismatched"
    assert metric_tag("conll2003", "validation", "f1") == "conll2003/val/f1"
    assert metric_tag("conll2003", "test", "f1") == "conll2003/test/f1"


def test_scalar_mix_with_one_hot_weights_is_that_layer_times_gamma():
    layers = [torch.randn(2, 5, 4) for _ in range(3)]
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([float("-inf"), 0.0, float("-inf")]))
        mix.gamma.fill_(2.5)
    assert torch.equal(mix(layers), 2.5 * layers[1])
    equal = ScalarMix(3)(layers)  # initial weights: the plain average
    assert torch.allclose(equal, sum(layers) / 3)
    with pytest.raises(ValueError, match="built for 3 layers"):
        mix(layers[:2])


def test_scalar_mix_reads_every_layer_and_learns_only_the_mix_and_the_head():
    settings = {"mode": "features", "attention": "bidirectional", "pooling": "first", "head_dropout": 0.0,
                "feature_layers": 4, "features": "scalar_mix"}
    m = FinetuneModule(TINY, NER, settings, OPTIM).eval()
    assert m.mix is not None and m.mix.weights.numel() == TINY["n_layers"] + 1  # the embedding layer too
    trainable = {name for name, p in m.named_parameters() if p.requires_grad}
    assert trainable == {"mix.weights", "mix.gamma", *(f"head.{n}" for n, _ in m.head.named_parameters())}
    b = batch([[2, 7, 8, 3]], [[0] * 4])
    with torch.no_grad():
        m.mix.weights.copy_(torch.tensor([float("-inf")] * TINY["n_layers"] + [0.0]))  # the last layer only
    layers = m.backbone.layer_states(b["input_ids"], attention=m.attention)
    assert torch.allclose(m(b), m.head(layers[-1]), atol=1e-6)
    with pytest.raises(ValueError, match="finetune.mode=features and task=conll2003"):
        FinetuneModule(TINY, RTE, settings, OPTIM)


def test_static_tagger_puts_each_words_vector_at_its_first_subword():
    tagger = StaticTagger(NER, words=3, dim=2, optim=OPTIM, vectors={}, head_dropout=0.0).eval()
    tagger.table.copy_(torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    tagger.head = torch.nn.Identity()  # the head's input is the output
    b = batch([[2, 7, 8, 9, 3]], [[0] * 5])
    b["word_positions"] = torch.tensor([[1, 3, -1]])  # word 0 at token 1 (two subwords), word 1 at 3, word 2 cut
    b["word_vector_ids"] = torch.tensor([[2, 0, 3]])  # word 1 has no vector
    expected = torch.zeros(1, 5, 2)
    expected[0, 1] = torch.tensor([3.0, 4.0])
    assert torch.equal(tagger(b), expected)
    with pytest.raises(ValueError, match="not a tagging task"):
        StaticTagger(RTE, words=3, dim=2, optim=OPTIM, vectors={})
