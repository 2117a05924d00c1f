"""Sampling in float64 and the two decoders: left to right (chain-rule objectives) and iterative unmasking
(objectives that give conditionals), chosen by the objective's class."""

from __future__ import annotations

import json
import re

import pytest
import torch
from omegaconf import OmegaConf

import armlm.generation.sampling as sampling
from armlm.common.config import compose_config
from armlm.generation.decode import Request, generator_for, iterative_unmasking, left_to_right
from armlm.generation.run import run_generation
from armlm.generation.sampling import SamplingSettings, filtered_log_probs, sample
from armlm.models.attention import BIDIRECTIONAL, CAUSAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.masked_diffusion import MaskedDiffusionLM
from armlm.objectives.mlm import MaskedLM
from armlm.objectives.plm import PermutationLM
from armlm.training.pretrained import Pretrained
from tests.helpers.checkpoints import save_checkpoint

LOGITS = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))


def frequencies(settings: SamplingSettings, n: int = 40_000, banned: torch.Tensor | None = None) -> torch.Tensor:
    ids, _ = sample(LOGITS.repeat(n, 1), settings, torch.Generator().manual_seed(0), banned)
    return torch.bincount(ids, minlength=4).double() / n


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_draws_follow_the_tempered_distribution(temperature):
    expected = torch.softmax(LOGITS[0].double() / temperature, -1)
    observed = frequencies(SamplingSettings(temperature=temperature))
    assert (observed - expected).abs().max() < 4 * (expected * (1 - expected) / 40_000).sqrt().max()


def test_top_p_keeps_the_smallest_set_reaching_p_and_top_k_the_k_best():
    assert torch.allclose(frequencies(SamplingSettings(top_p=0.8)), torch.tensor([0.625, 0.375, 0, 0]).double(),
                          atol=0.01)
    kept = filtered_log_probs(LOGITS, SamplingSettings(top_k=3)).exp()[0]
    assert kept[3] == 0 and torch.allclose(kept[:3], torch.tensor([0.5, 0.3, 0.15]).double() / 0.95)
    assert frequencies(SamplingSettings(temperature=0), n=10).tolist() == [1, 0, 0, 0]
    assert frequencies(SamplingSettings(), banned=torch.tensor([0, 1]))[:2].sum() == 0


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-2), dict(top_p=0), dict(top_p=1.5)])
def test_bad_sampling_settings_are_refused(bad):
    with pytest.raises(ValueError):
        SamplingSettings(**bad)


@pytest.mark.parametrize("bad, says", [(dict(steps=0), "steps=0: expected an integer >= 1"),
                                       (dict(order="sideways"), "order='sideways': expected one of"),
                                       (dict(new_tokens=0), "new_tokens=0: expected an integer >= 1"),
                                       (dict(samples=True), "samples=True: expected an integer >= 1")])
def test_a_request_out_of_range_is_refused_when_built_whichever_sampler_reads_it(bad, says):
    """Only iterative unmasking checked steps= and order=, and only when it ran; the request checks what it holds
    by the rules `armlm generate` checks its config by (REQUEST_RULES)."""
    with pytest.raises(ValueError, match="^" + re.escape(says)):
        request(**bad)


def test_the_noise_is_drawn_in_float64(monkeypatch):
    """float32 uniforms cut the Gumbel tail (-log(-log u) is at most 16.6 when u rounds to 1), lowering the
    temperature; the draw must be float64."""
    dtypes = []
    real_rand = torch.rand

    def spy(*args, **kwargs):
        dtypes.append(kwargs.get("dtype"))
        return real_rand(*args, **kwargs)

    monkeypatch.setattr(sampling.torch, "rand", spy)
    sample(LOGITS, SamplingSettings(), torch.Generator().manual_seed(0))
    assert dtypes == [torch.float64]


def test_a_rare_token_comes_up_at_its_rate():
    """Gumbel-max in float64: a token at probability 1e-4 comes up 20 times in 200,000 draws, give or take."""
    probs = torch.tensor([1 - 1e-4, 1e-4], dtype=torch.float64)
    ids, _ = sample(probs.log()[None].repeat(200_000, 1), SamplingSettings(), torch.Generator().manual_seed(1))
    assert 5 <= int(ids.sum()) <= 40  # expected 20


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=12, max_len=16, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                   dropout=0.0)).eval()


def request(**changes) -> Request:
    settings = dict(prompt=torch.tensor([2, 7, 8]), new_tokens=5, samples=3, sampling=SamplingSettings(temperature=0),
                    banned=torch.tensor([0, 1, 2, 3]), eod_id=5, mask_id=4)
    return Request(**{**settings, **changes})


def test_left_to_right_greedy_is_the_argmax_chain(model):
    ids = left_to_right(model, request(banned=torch.tensor([0, 1, 2, 3, 4, 5])), torch.Generator())
    expected = torch.tensor([[2, 7, 8]])
    for _ in range(5):
        logits = model.logits(model(expected, attention=CAUSAL)[:, -1])
        logits[:, :6] = float("-inf")
        expected = torch.cat([expected, logits.argmax(-1, keepdim=True)], 1)
    assert torch.equal(ids, expected.repeat(3, 1))


def test_a_plm_samples_from_its_query_stream_not_from_causal_content_states(model):
    """`armlm generate` for XLNet's PLM: each next token is the argmax of the identity order's query stream."""
    ids = generator_for(PermutationLM)(model, request(banned=torch.tensor([0, 1, 2, 3, 4, 5])), torch.Generator(),
                                       PermutationLM)
    expected = torch.tensor([[2, 7, 8]])
    for _ in range(5):
        logits = model.logits(PermutationLM.next_token_states(model, expected, 4)[:, -1])
        logits[:, :6] = float("-inf")
        expected = torch.cat([expected, logits.argmax(-1, keepdim=True)], 1)
    assert torch.equal(ids, expected.repeat(3, 1))
    assert not torch.equal(ids, left_to_right(model, request(banned=torch.tensor([0, 1, 2, 3, 4, 5])),
                                              torch.Generator()))


def test_left_to_right_stops_a_sample_at_eod(model):
    with torch.no_grad():
        model.lm_bias[5] += 100.0  # [EOD] always wins
    try:
        ids = left_to_right(model, request(), torch.Generator())
    finally:
        with torch.no_grad():
            model.lm_bias[5] -= 100.0
    assert ids.shape == (3, 4) and (ids[:, 3] == 5).all()


def test_unmasking_reveals_on_schedule_and_keeps_the_prompt(model, monkeypatch):
    calls = []
    forward = model.forward

    def counting(ids, **kwargs):
        calls.append(int((ids == 4).sum(1)[0]))  # masked positions per row when the pass runs
        return forward(ids, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    ids = iterative_unmasking(model, request(steps=2, sampling=SamplingSettings()), torch.Generator().manual_seed(0))
    assert calls == [5, 2]  # 5 masked: ceil(5/2) = 3 revealed, then the last 2
    assert (ids[:, :3] == torch.tensor([2, 7, 8])).all() and not (ids == 4).any()
    assert not torch.isin(ids[:, 3:], torch.tensor([0, 1, 2, 3, 4])).any()


@pytest.mark.parametrize("order", ["confidence", "random"])
def test_the_first_step_reveals_the_most_probable_position_or_a_random_one(model, monkeypatch, order):
    start = torch.tensor([[2, 7, 8, 4, 4, 4]])
    with torch.no_grad():
        logits = model.logits(model(start, attention=BIDIRECTIONAL))[0, 3:]
    logits[:, :5] = float("-inf")  # the request bans ids 0-3 and [MASK] (4); [EOD] (5) may be drawn
    most_confident = 3 + int(logits.double().softmax(-1).max(-1).values.argmax())
    seen = []
    forward = model.forward

    def recording(ids, **kwargs):
        seen.append(ids.clone())
        return forward(ids, **kwargs)

    monkeypatch.setattr(model, "forward", recording)
    revealed = set()
    for seed in range(12):
        seen.clear()
        # greedy draws: the confidence of a position is its most probable token's probability
        iterative_unmasking(model, request(new_tokens=3, steps=3, samples=1, order=order),
                            torch.Generator().manual_seed(seed))
        after_first = (seen[1][0, 3:] != 4).nonzero().flatten() + 3  # what the second pass sees unmasked
        assert len(after_first) == 1
        revealed.add(int(after_first[0]))
    if order == "confidence":
        assert revealed == {most_confident}
    else:
        assert len(revealed) > 1


def test_the_objective_class_picks_the_decoder():
    assert generator_for(AutoregressiveLM).draw is left_to_right and generator_for(PermutationLM).draw is left_to_right
    assert generator_for(MaskedLM).draw is iterative_unmasking
    assert generator_for(MaskedDiffusionLM).draw is iterative_unmasking

    class Odd(AutoregressiveLM):
        scoring = "sideways"

    with pytest.raises(ValueError, match="no sampler"):
        generator_for(Odd)


@pytest.mark.parametrize("objective,method", [("mlm", "iterative_unmasking"), ("ar", "left_to_right"),
                                              ("plm", "left_to_right")])
def test_generate_command_writes_samples(tmp_path, objective, method):
    checkpoint = save_checkpoint(tmp_path / "ckpt", objective)
    unmasking = {"steps": 2, "order": "random"} if method == "iterative_unmasking" else {"steps": None,
                                                                                          "order": "confidence"}
    cfg = OmegaConf.create({"checkpoint": str(checkpoint), "prompt": "a b", "new_tokens": 4, "samples": 2,
                            **unmasking, "temperature": 1.0, "top_k": 0, "top_p": 0.9, "seed": 3,
                            "device": "cpu", "output_dir": str(tmp_path / "out")})
    result = run_generation(cfg)
    saved = json.loads((tmp_path / "out" / "samples.json").read_text())
    assert saved == result and len(saved["samples"]) == 2 and saved["method"] == method
    assert all(text.startswith("a b") for text in saved["samples"])
    # what the sampler read; null for the unmasking settings a left-to-right sampler does not read
    assert (saved["steps"], saved["order"]) == ((2, "random") if method == "iterative_unmasking" else (None, None))
    cfg.new_tokens = 100
    with pytest.raises(ValueError, match="lower new_tokens"):
        run_generation(cfg)


def test_a_setting_the_checkpoints_sampler_would_ignore_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """steps= and order= set iterative unmasking; an AR checkpoint samples left to right, which read neither, and
    its samples.json recorded them as if they had been used. Refused before the model is built."""
    checkpoint = save_checkpoint(tmp_path / "ckpt", "ar")

    def built(*args, **kwargs):
        raise AssertionError("the model was built before the refusal")

    monkeypatch.setattr(Pretrained, "backbone", built)
    cfg = OmegaConf.create({"checkpoint": str(checkpoint), "prompt": "a b", "new_tokens": 4, "samples": 2,
                            "steps": 2, "order": "random", "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 3,
                            "device": "cpu", "output_dir": str(tmp_path / "out")})
    with pytest.raises(ValueError, match=r"^steps=2, order='random': this checkpoint samples left_to_right, which "
                                         r"does not read steps or order .*; drop them$"):
        run_generation(cfg)
    cfg.steps = None
    with pytest.raises(ValueError, match=r"^order='random': this checkpoint samples left_to_right.*; drop it$"):
        run_generation(cfg)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("setting,line", [
    ("seed=abc", "seed='abc': expected an integer >= 0"),
    ("new_tokens=0", "new_tokens=0: expected an integer >= 1"),
    ("samples=-1", "samples=-1: expected an integer >= 1"),
    ("steps=0", "steps=0: expected an integer >= 1, or null"),
    ("order=sideways", "order='sideways': expected one of ('confidence', 'random')"),
    ("temperature=abc", "temperature='abc': expected a number >= 0"),
    ("top_k=2.5", "top_k=2.5: expected an integer >= 0"),
])
def test_bad_generate_settings_are_refused_before_the_checkpoint_is_read(setting, line):
    """Every objective's sampler: a bad order or steps= was caught only by iterative unmasking, seed=abc ended in
    int()'s ValueError traceback."""
    cfg = compose_config("generate", ["checkpoint=/nowhere/run", setting])
    with pytest.raises(ValueError, match=re.escape(line)):
        run_generation(cfg)
