"""analysis/findings/sides.py (parsed by analysis.findings.measures.parse_side) and the typed gate: a side is checked
against its quantity once, where the study is read; what a malformed side or gate would only break hours later, in
a report, is refused up front, in one line naming the key."""

from pathlib import Path

import pytest
import yaml

from armlm.analysis.findings.gate import Gate, GatedArm, arms_read
from armlm.analysis.findings.measures import describe, parse_side
from armlm.analysis.findings.quantities import QUANTITIES
from armlm.analysis.findings.registrations import StudySpec
from armlm.analysis.findings.sides import Side
from armlm.common.errors import ArmlmError

REPO = Path(__file__).resolve().parents[1]
CAUSAL = {"arm": "mlm", "finetune": "conll2003-causal", "metric": "f1", "epoch": 3}


def test_a_side_keeps_its_quantity_spec_and_options():
    side = parse_side(CAUSAL, "a")
    assert side == Side("mlm", "finetune", "conll2003-causal", metric="f1", epoch=3)
    assert side.arms() == ["mlm"] and side.reference is None
    assert describe(side) == "mlm: finetune conll2003-causal f1 after epoch 3"


def test_relative_to_builds_the_reference_by_the_keys_it_changes():
    interaction = parse_side({**CAUSAL, "relative_to": {"finetune": "conll2003-bidirectional"}}, "a")
    assert interaction.reference == Side("mlm", "finetune", "conll2003-bidirectional", metric="f1", epoch=3)
    assert interaction.plain == parse_side(CAUSAL, "a") and interaction.arms() == ["mlm"]
    across = parse_side({**CAUSAL, "relative_to": "ar"}, "a")
    assert across.arms() == ["mlm", "ar"] and describe(across).endswith("minus ar's")
    assert describe(interaction) == ("mlm: finetune conll2003-causal f1 after epoch 3 minus "
                                     "mlm: finetune conll2003-bidirectional f1 after epoch 3")


@pytest.mark.parametrize(("raw", "match"), [
    ({"arm": "mlm"}, "exactly one of"),
    ({"arm": "mlm", "finetune": "x", "zeroshot": {"method": "pll"}, "metric": "f1"}, "exactly one of"),
    ({"finetune": "conll2003-full", "metric": "f1"}, "needs an arm"),
    ({"arm": "mlm", "finetune": "conll2003-full"}, r"missing \['metric'\]"),
    ({"arm": "mlm", "finetune": "conll2003-full", "metric": "f1", "epoc": 3}, r"unknown keys \['epoc'\]"),
    ({"arm": "mlm", "zeroshot": {"method": "pll"}, "metric": "f1"}, r"unknown keys \['metric'\]"),
    ({"arm": "mlm", "zeroshot": {"methd": "pll"}}, r"zeroshot=.*it takes \{method\} and optionally \{level, name\}"),
    ({"arm": "mlm", "zeroshot": "pll"}, "it takes {method}"),
    ({"arm": "mlm", "likelihood": {"key": "nll"}}, "likelihood takes a name"),
    ({**CAUSAL, "epoch": 0}, "epoch=0; give the epoch"),
    ({**CAUSAL, "relative_to": {"split": "test"}}, "relative_to=.*changes keys the side does not have"),
    ({**CAUSAL, "relative_to": {"metric": "accuracy", "zeroshot": {"method": "pll"}}}, "changes keys"),
    ("mlm", "a side is"),
])
def test_a_malformed_side_is_refused_naming_the_key(raw, match):
    with pytest.raises(ArmlmError, match=match):
        parse_side(raw, "finding F: a")


def test_every_quantity_documents_the_keys_it_checks():
    """Each quantity's docstring is its grammar: every key it checks is named there, so the refusal and the
    documentation say the same thing."""
    for quantity in QUANTITIES.values():
        keys = [*quantity.options, *(k for keys in (quantity.spec_keys or ()) for k in keys)]
        assert all(k in type(quantity).__doc__ for k in keys), (quantity.name, keys)


def test_every_registered_study_parses_into_typed_sides_and_gate():
    for path in sorted((REPO / "configs" / "study").glob("*.yaml")):
        study = yaml.safe_load(path.read_text())
        spec = StudySpec.parse(study)
        sides = [s for f in spec.findings.values() for s in (f.a, f.b)] + [c.value for c in spec.checks.values()]
        assert all(isinstance(s, Side) for s in sides), path.name
        assert spec.gate is None or isinstance(spec.gate, Gate)


def test_a_gate_is_parsed_into_its_rules_in_order_with_numbers():
    gate = Gate.parse({"min_discrimination": {"alpha": 0.05}, "min_below_unigram": 0.5, "clear_by_mc_stderrs": 2})
    assert [rule.key for rule, _ in gate.rules] == ["min_below_unigram", "min_discrimination", "clear_by_mc_stderrs"]
    assert [value for _, value in gate.rules] == [0.5, 0.05, 2.0]
    assert gate.margin.key == "min_below_unigram" and gate.value("clear_by_mc_stderrs") == 2.0
    assert gate.value("min_above_majority") == 0.0 and Gate.parse(None) is None


@pytest.mark.parametrize(("raw", "match"), [
    ({"own_below_unigram": "half"}, r"own_below_unigram=half; give a number >= 0"),
    ({"own_below_unigram": -0.1}, "give a number >= 0"),
    ({"own_below_unigram": 0.5, "min_discrimination": 0.05}, r"min_discrimination=0.05; give \{alpha"),
    ({"own_below_unigram": 0.5, "min_discrimination": {"alpha": 1.5}}, "min_discrimination"),
    ({"own_below_unigram": 0.5, "min_above_chanse": 0.1}, r"unknown rules \['min_above_chanse'\]"),
    ([0.5], "give a mapping of rules"),
])
def test_a_malformed_gate_is_refused(raw, match):
    with pytest.raises(ArmlmError, match=match):
        Gate.parse(raw)


def test_the_gate_reads_each_arms_own_pretraining_run_and_skips_ungated_arms():
    arms = {"mlm": GatedArm.parse("mlm", {}), "mlm_probe": GatedArm.parse("mlm_probe", {"from_arm": "mlm"}),
            "skipgram": GatedArm.parse("skipgram", {"gate": False})}
    sides = (parse_side({"arm": "mlm_probe", "finetune": "conll2003-full", "metric": "f1", "relative_to": "skipgram"},
                        "a"), parse_side({"arm": "ar", "pretraining": "val_likelihood"}, "b"))
    assert arms_read(arms, sides) == ["ar", "mlm"]


def test_a_check_or_finding_reading_an_unknown_arm_is_refused_where_the_study_is_read():
    check = {"what": "x", "value": {"arm": "electra", "pretraining": "below_unigram"}}
    with pytest.raises(ArmlmError, match="check c: value.arm='electra' is not one of the arms"):
        StudySpec.parse({"arms": {"mlm": {}}, "checks": {"c": check}})
    with pytest.raises(ArmlmError, match=r"check c=.*give \{what"):
        StudySpec.parse({"arms": {"mlm": {}}, "checks": {"c": {"value": check["value"], "wat": "x"}}})
