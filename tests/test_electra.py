"""ELECTRA and its §3.5 ablations (objectives.electra, objectives.generator), against hand computations."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.electra import AllTokensMLM, Electra, ReplaceMLM, binary_entropy
from armlm.objectives.generator import Generator, sample_rows
from tests.helpers.models import ELECTRA_SHAPE


def build(cls, vocab, **settings):
    torch.manual_seed(0)
    objective = cls(**ELECTRA_SHAPE, **settings)
    objective.set_vocabulary(vocab)
    model = Transformer(ModelConfig(vocab_size=vocab.size, d_model=64, n_layers=2, n_heads=2, d_ff=128, max_len=64,
                                    dropout=0.0))
    return objective, model


def batch_of(vocab, rows=4, length=24, seed=0):
    ids = torch.randint(6, vocab.size, (rows, length), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = vocab.cls_id
    ids[:, 12] = vocab.eod_id
    return {"input_ids": ids}


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_the_generator_is_a_quarter_as_wide_with_64_wide_heads():
    wide = Generator(**{**ELECTRA_SHAPE, "d_model": 768, "n_layers": 12}, width_fraction=1 / 3)
    assert (wide.config.d_model, wide.config.n_heads, wide.config.d_ff) == (256, 4, 1024)  # ELECTRA-Base's
    small = Generator(**ELECTRA_SHAPE, width_fraction=0.25)
    assert (small.config.d_model, small.config.n_heads, small.config.n_layers) == (16, 1, 2)
    with pytest.raises(ValueError, match="generator_fraction"):
        Generator(**ELECTRA_SHAPE, width_fraction=0.0)


def test_rtd_labels_mark_exactly_the_samples_that_differ_from_the_original(vocab, monkeypatch):
    objective, model = build(Electra, vocab)
    batch = batch_of(vocab)
    corrupted = objective.replace(batch, model, gen())
    assert corrupted.selected.any() and torch.equal(corrupted.replaced, corrupted.inputs != batch["input_ids"])
    assert not (corrupted.replaced & ~corrupted.selected).any()  # only filled positions can be replaced
    assert torch.equal(corrupted.inputs[~corrupted.selected], batch["input_ids"][~corrupted.selected])

    def certain(token_of_row):  # a generator that samples one token per selected row with certainty
        def forward(model, input_ids, attention, attention_mask, token_type_ids, output_mask):
            logits = torch.full((int(output_mask.sum()), vocab.size), -1e4)
            logits[torch.arange(logits.shape[0]), token_of_row(output_mask)] = 1e4
            return logits
        return forward

    # every sample equals the original: nothing is "replaced", so every detection label is 0 (the paper's rule)
    monkeypatch.setattr(objective.generator, "forward", certain(lambda mask: batch["input_ids"][mask]))
    same = objective.replace(batch, model, gen())
    assert same.selected.any() and not same.replaced.any() and torch.equal(same.inputs, batch["input_ids"])
    # a sample that always differs: exactly the selected positions are replaced
    other = 6 + (batch["input_ids"] - 6 + 1) % (vocab.size - 6)
    monkeypatch.setattr(objective.generator, "forward", certain(lambda mask: other[mask]))
    assert torch.equal(objective.replace(batch, model, gen()).replaced, objective.replace(batch, model, gen()).selected)


def test_the_discriminator_loss_never_reaches_the_generator(vocab):
    """The generator's own parameters get the gradient of its masked-LM loss alone: its samples carry none of the
    discriminator's. The embeddings they share get both."""
    objective, model = build(Electra, vocab)
    batch = batch_of(vocab)
    objective.loss(batch, model, gen()).loss.backward()
    full = {n: p.grad.clone() for n, p in objective.generator.named_parameters()}
    embedding_full = model.token_embedding.weight.grad.clone()
    objective.zero_grad(), model.zero_grad()
    objective.replace(batch, model, gen()).generator_loss.backward()
    for name, p in objective.generator.named_parameters():
        assert torch.allclose(p.grad, full[name], atol=1e-7), name
    assert not torch.allclose(model.token_embedding.weight.grad, embedding_full)


@pytest.mark.parametrize("rtd_positions", ["all", "masked"])
def test_the_loss_is_the_generator_loss_plus_lambda_times_the_detection_loss(vocab, rtd_positions):
    objective, model = build(Electra, vocab, rtd_positions=rtd_positions)
    batch = batch_of(vocab)
    out = objective.loss(batch, model, gen())
    corrupted = objective.replace(batch, model, gen())
    # by hand: the generator's mean NLL over the selected positions, from its full logits
    masked, labels = objective.masking.corrupt(batch["input_ids"], gen())
    selected = labels >= 0
    logits = objective.generator(model, masked, BIDIRECTIONAL, None, None, selected)
    generator_loss = F.cross_entropy(logits, labels[selected])
    states = model(corrupted.inputs, attention=BIDIRECTIONAL)
    scored = torch.ones_like(selected) if rtd_positions == "all" else selected
    detection = F.binary_cross_entropy_with_logits(objective.rtd_head(states[scored]).squeeze(-1),
                                                   corrupted.replaced[scored].float())
    assert out.loss.item() == pytest.approx(generator_loss.item() + 50 * detection.item(), rel=1e-5)
    assert out.extras["rtd_loss"][0].item() == pytest.approx(detection.item(), rel=1e-5)
    share = corrupted.replaced[scored].float().mean().item()
    assert out.extras["replaced_share"][0].item() == pytest.approx(share) and out.extras["replaced_share"][1] == int(
        scored.sum())
    # the gate's baseline: the binary entropy of the share pooled over validation (the metric's weighted mean)
    entropy = 0.0 if share in (0.0, 1.0) else -(share * math.log(share) + (1 - share) * math.log(1 - share))
    assert objective.own_baseline({"replaced_share": torch.tensor(share)}).item() == pytest.approx(entropy, abs=1e-6)


def test_the_generator_shares_the_embeddings_but_not_the_output_bias(vocab):
    objective, model = build(ReplaceMLM, vocab)
    assert objective.generator.output_bias.shape == (vocab.size,)
    objective.loss(batch_of(vocab), model, gen()).loss.backward()
    assert objective.generator.output_bias.grad.abs().sum() > 0 and model.token_embedding.weight.grad is not None
    before = model.lm_bias.grad.clone()
    model.zero_grad(), objective.zero_grad()
    objective.replace(batch_of(vocab), model, gen()).generator_loss.backward()
    assert model.lm_bias.grad is None or not model.lm_bias.grad.any()  # the backbone's bias: the backbone's alone
    assert before.abs().sum() > 0
    unset = ReplaceMLM(**ELECTRA_SHAPE)
    with pytest.raises(RuntimeError, match="set_vocabulary"):
        unset.generator(model, batch_of(vocab)["input_ids"], BIDIRECTIONAL, None, None,
                        torch.ones(4, 24, dtype=torch.bool))


def test_all_tokens_mlm_is_gated_on_the_selected_positions(vocab):
    objective, model = build(AllTokensMLM, vocab)
    with model.recording_targets() as recorded:
        out = objective.loss(batch_of(vocab), model, gen())
    corrupted = objective.replace(batch_of(vocab), model, gen())
    (_, targets), = recorded
    assert torch.equal(targets, batch_of(vocab)["input_ids"][corrupted.selected])  # the unigram's targets
    assert objective.own_loss_metric == "selected_loss"
    assert out.extras["selected_loss"][1] == int(corrupted.selected.sum())


def test_binary_entropy_is_the_best_constant_guess():
    assert binary_entropy(torch.tensor(0.5)).item() == pytest.approx(0.693147, rel=1e-5)
    assert binary_entropy(torch.tensor(0.0)).item() == binary_entropy(torch.tensor(1.0)).item() == 0.0


def test_replace_mlm_predicts_the_originals_of_the_filled_positions(vocab):
    objective, model = build(ReplaceMLM, vocab)
    batch = batch_of(vocab)
    out = objective.loss(batch, model, gen())
    corrupted = objective.replace(batch, model, gen())
    states = model(corrupted.inputs, attention=BIDIRECTIONAL)[corrupted.selected]
    nll = F.cross_entropy(model.logits(states), batch["input_ids"][corrupted.selected])
    assert out.loss.item() == pytest.approx(corrupted.generator_loss.item() + nll.item(), rel=1e-5)
    assert int(out.predicted_tokens) == int(corrupted.selected.sum())


def test_all_tokens_mlm_reads_the_copy_mixture_at_every_position(vocab):
    objective, model = build(AllTokensMLM, vocab)
    batch = batch_of(vocab)
    out = objective.loss(batch, model, gen())
    corrupted = objective.replace(batch, model, gen())
    targets = torch.ones_like(corrupted.selected)
    targets[:, 0] = False  # every position after [CLS]
    states = model(corrupted.inputs, attention=BIDIRECTIONAL)[targets]
    d = torch.sigmoid(objective.copy_head(states)).squeeze(-1)
    # brute force: the mixture distribution written out over the whole vocabulary
    mixture = (1 - d)[:, None] * torch.softmax(model.logits(states), -1) + d[:, None] * F.one_hot(
        corrupted.inputs[targets], vocab.size)
    nll = -mixture.gather(1, batch["input_ids"][targets][:, None]).log().mean()
    assert out.loss.item() == pytest.approx(corrupted.generator_loss.item() + nll.item(), rel=1e-5)
    assert int(out.predicted_tokens) == int(targets.sum())


@pytest.mark.parametrize("cls,settings", [(Electra, {}), (Electra, {"rtd_positions": "masked"}), (ReplaceMLM, {}),
                                          (AllTokensMLM, {})])
def test_the_flops_of_both_networks_are_counted(vocab, cls, settings):
    objective, model = build(cls, vocab, **settings)
    batch = batch_of(vocab)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        reported = objective.loss(batch, model, gen()).forward_flops
    assert counter.get_total_flops() == pytest.approx(reported, rel=1e-12)
    backbone_alone = model.forward_flops(batch["input_ids"], BIDIRECTIONAL)
    assert reported > objective.generator.forward_flops(model, batch["input_ids"], BIDIRECTIONAL, None, 1) > 0
    assert reported < 2 * backbone_alone  # a quarter-wide generator is a fraction of the backbone


def test_bad_settings_are_refused(vocab):
    with pytest.raises(ValueError, match="rtd_positions"):
        Electra(**ELECTRA_SHAPE, rtd_positions="some")
    with pytest.raises(ValueError, match="discriminator_weight"):
        Electra(**ELECTRA_SHAPE, discriminator_weight=0)


def test_the_generators_samples_follow_its_softmax():
    """Inverse-CDF sampling at one uniform per row (what lets an eager and a compiled step draw alike): 200,000
    draws from three rows' softmax, each row's frequencies within a chi-square test of its probabilities."""
    from scipy.stats import chisquare

    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0], [5.0, -5.0, 1.0, 0.0]])
    draws = 200_000
    uniforms = torch.rand(draws * 3, generator=torch.Generator().manual_seed(0))
    samples = sample_rows(logits.repeat_interleave(draws, 0), uniforms).view(3, draws)
    probs = torch.softmax(logits, -1)
    for row in range(3):
        counts = torch.bincount(samples[row], minlength=4).double()
        expected = probs[row].double() * draws
        keep = expected > 5  # chi-square's rule; a rarer class must simply be rare
        assert chisquare(counts[keep].numpy(), expected[keep].numpy() * counts[keep].sum().item()
                         / expected[keep].sum().item()).pvalue > 1e-3
        assert (counts[~keep] <= 20).all()
    # a class of zero probability is never drawn
    assert not (sample_rows(torch.tensor([[0.0, float("-inf"), 0.0]]).expand(1000, 3),
                            torch.rand(1000, generator=torch.Generator().manual_seed(1))) == 1).any()
