"""studies/arms.py: a planner's arms are typed, their fields the grammar; values stay as written."""

from __future__ import annotations

import pytest

from armlm.studies.arms import EmbeddingsArm, PipelineArm, parse_arm, parse_arms


def test_an_arm_parses_to_its_planners_type_with_its_values_as_written():
    arm = parse_arm(PipelineArm, "ar_e2", {"pretrain": ["objective=ar"], "epochs": 2, "unique_tokens": 1_048_576})
    assert arm == PipelineArm(pretrain=("objective=ar",), epochs=2, unique_tokens=1_048_576)
    assert isinstance(arm.epochs, int) and f"data_epochs={arm.epochs}" == "data_epochs=2"  # what a stage records
    assert arm.given("epochs") and not arm.given("budget_scale") and arm.diagnose is None
    assert list(parse_arms(EmbeddingsArm, {"w2v": {"method": "word2vec_skipgram"}, "mlm": {"checkpoint_arm": "mlm"}}))\
        == ["w2v", "mlm"]


@pytest.mark.parametrize("kind, raw, match", [
    (PipelineArm, {"pretrain": ["objective=ar"], "finetunes": ["full"]}, r"unknown keys \['finetunes'\]; an arm takes"),
    (PipelineArm, {"pretrain": "objective=ar"}, "pretrain='objective=ar' is not a"),  # a list, not a string
    (PipelineArm, {"from_arm": "mlm", "checkpoint_fraction": "half"}, "checkpoint_fraction='half'"),
    (PipelineArm, {"pretrain": ["objective=ar"], "epochs": True}, "epochs=True"),  # a bool is no count
    (PipelineArm, {"pretrain": ["objective=ar"], "unique_tokens": 1.5}, "unique_tokens=1.5"),
    (PipelineArm, {"model": "hf:gpt2", "trust_remote_code": "yes"}, "trust_remote_code='yes'"),
    (EmbeddingsArm, {"method": "glove", "checkpoint": "mlm"}, r"unknown keys \['checkpoint'\]"),
])
def test_a_key_or_value_outside_the_grammar_is_refused_naming_it(kind, raw, match):
    with pytest.raises(ValueError, match=match):
        parse_arm(kind, "odd", raw)


def test_the_grammar_is_the_dataclass_and_every_field_says_what_it_is():
    source = __import__("inspect").getsource(PipelineArm)
    for name in PipelineArm.__dataclass_fields__:
        line = next(line for line in source.splitlines() if line.strip().startswith(f"{name}:"))
        documented = "#" in line or name in ("unique_tokens", "epochs")  # epochs and unique_tokens share a comment
        assert documented, name
