"""Objectives in phases within one run (objectives.phased): where the switch falls, what validation and fine-tuning
see, and that a run resumed in either phase, or across the switch, ends with the uninterrupted run's weights."""

import json
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.base import TrainingProgress
from armlm.objectives.mlm import MaskedLM
from armlm.objectives.mlm_nsp import MaskedLMWithNSP
from armlm.objectives.phased import PhasedObjective
from armlm.training.callbacks import TokenAccounting
from armlm.training.run import run_pretraining
from tests.helpers.configs import tiny_config


def phased(first: float = 0.5) -> PhasedObjective:
    return PhasedObjective({"causal": {"until": first, "objective": AutoregressiveLM()},
                            "masked": {"until": 1.0, "objective": MaskedLM()}})


def test_a_step_belongs_to_the_phase_its_first_token_falls_in():
    objective = phased(0.25)
    assert objective.switch_tokens(1000) == {"causal": 0, "masked": 250}
    assert objective.phase_at(TrainingProgress(249, 1000)) == "causal"
    assert objective.phase_at(TrainingProgress(250, 1000)) == "masked"
    objective.set_progress(TrainingProgress(0, 1000))
    assert objective.current == "causal"
    objective.set_progress(None)  # validation runs the last phase
    assert objective.current == "masked"


def test_the_last_phase_answers_for_validation_and_downstream():
    objective = phased()
    assert objective.val_loss_kind == "masked_token" and objective.finetune_attention == "bidirectional"
    config = {"_target_": "armlm.objectives.phased.PhasedObjective",
              "phases": {"masked": {"until": 1.0, "objective": {"_target_": "armlm.objectives.mlm.MaskedLM"}},
                         "causal": {"until": 0.5, "objective": {"_target_": "armlm.objectives.ar.AutoregressiveLM"}}}}
    assert PhasedObjective.downstream(config) is MaskedLM


@pytest.mark.parametrize("phases,match", [
    ({"a": {"until": 0.5, "objective": AutoregressiveLM()}}, "last must be 1.0"),
    ({"a": {"until": 1.0, "objective": AutoregressiveLM()}, "b": {"until": 1.0, "objective": MaskedLM()}}, "differ"),
    ({"a": {"until": 0.5, "objective": AutoregressiveLM()}, "b": {"until": 1.0, "objective": MaskedLMWithNSP(d_model=16)}},
     "input"),
    ({"a": {"until": 1.0, "objective": "ar"}}, "not an armlm objective"),
    ({"a": {"share": 1.0, "objective": AutoregressiveLM()}}, "exactly the keys"),
])
def test_bad_phases_are_refused(phases, match):
    with pytest.raises(ValueError, match=match):
        PhasedObjective(phases)


def final_weights(folder: Path) -> dict[str, torch.Tensor]:
    return torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]


def logged(folder: Path, tag: str) -> dict[int, float]:
    events = EventAccumulator(str(next(folder.rglob("events.out.tfevents*")).parent))
    events.Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


@pytest.mark.slow
def test_the_switch_is_at_the_exact_token_and_a_resumed_run_ends_bit_exactly(tmp_path, cache_dir):
    """8 steps of 8 x 32 tokens, AR until 3/8 of the 2,048-token budget: MLM from token 768, step 3 (0-based)."""
    settings = ("objective=ar_mlm", "objective.phases.causal.until=0.375", "trainer.log_every_n_steps=1",
                "save_at_tokens=[512,1024]")
    whole = tmp_path / "whole"
    summary = run_pretraining(tiny_config(whole, cache_dir, *settings))
    assert summary["budget_marks"] == summary["phase_starts"] == {"causal": 0, "masked": 768}
    phase = logged(whole, "train/phase")  # logged at the step it belongs to (Lightning counts steps from 0)
    assert [phase[s] for s in sorted(phase)] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert "train/mask_share" in {t for t in EventAccumulator(str(next(whole.rglob("events.out*")).parent)).Reload()
                                  .Tags()["scalars"]}
    reference = final_weights(whole)
    for tokens in (512, 1024):  # killed in the causal phase (the switch still ahead) and in the masked one
        resumed = tmp_path / f"resumed-{tokens}"
        run_pretraining(tiny_config(resumed, cache_dir, *settings,
                              f"ckpt_path={whole / 'checkpoints' / f'tokens-{tokens}.ckpt'}"))
        for key, value in reference.items():
            torch.testing.assert_close(final_weights(resumed)[key], value, rtol=0, atol=0, msg=key)
        # the start recorded before the kill comes back from the checkpoint; the one after it is measured again
        assert json.loads((resumed / "summary.json").read_text())["phase_starts"] == {"causal": 0, "masked": 768}
    assert json.loads((whole / "summary.json").read_text())["val_loss_kind"] == "masked_token"


@pytest.mark.slow
def test_a_mark_between_batches_switches_at_the_next_batch_and_the_summary_says_where(tmp_path, cache_dir):
    """until=0.4 of 2,048 tokens marks token 819, inside step 3's 768-1,023: MLM starts with step 4, at 1,024."""
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar_mlm", "objective.phases.causal.until=0.4",
                                    "trainer.log_every_n_steps=1"))
    assert summary["budget_marks"] == {"causal": 0, "masked": 819}
    assert summary["phase_starts"] == {"causal": 0, "masked": 1024}
    phase = logged(tmp_path, "train/phase")
    assert [phase[s] for s in sorted(phase)] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.slow
def test_objectives_of_one_phase_record_no_phase_starts(tmp_path, cache_dir):
    summary = run_pretraining(tiny_config(tmp_path, cache_dir, "objective=ar", "trainer.max_steps=2"))
    assert summary["phase_starts"] == {} and summary["budget_marks"] == {}


def test_a_checkpoint_from_before_the_record_leaves_the_phase_starts_unknown():
    old = TokenAccounting()
    old.load_state_dict({"tokens_seen": 512, "pred_tokens_seen": 80, "flops_seen": 1.0})
    old.phase_started("masked")  # 512 would be where this process resumed, not where the phase began
    assert old.phase_starts is None
    new = TokenAccounting()
    new.load_state_dict({"tokens_seen": 512, "pred_tokens_seen": 80, "flops_seen": 1.0, "phase_starts": {"causal": 0}})
    new.phase_started("causal")
    new._tokens_seen = 768  # where 256 more input tokens leave the count
    new.phase_started("masked")
    assert new.phase_starts == {"causal": 0, "masked": 768} and new.state_dict()["phase_starts"] == new.phase_starts
