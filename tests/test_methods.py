"""diagnostics/methods.py: the objective's class picks how its checkpoints are scored, and what is affordable."""

import pytest

from armlm.diagnostics.methods import METHODS, scoring_method
from armlm.diagnostics.run import MAX_EXACT_PASSES, check_affordable, evaluate_config
from armlm.objectives.ar import AutoregressiveLM
from armlm.objectives.mlm import MaskedLM
from armlm.objectives.mlm_nsp import MaskedLMWithNSP


def test_the_objective_class_names_its_scoring_method():
    assert scoring_method(AutoregressiveLM) is METHODS["chain_rule"]
    assert scoring_method(MaskedLM) is scoring_method(MaskedLMWithNSP) is METHODS["conditionals"]
    assert METHODS["chain_rule"].headline_joint == "ar_exact" and METHODS["conditionals"].headline_joint == "ag"

    class Sideways(MaskedLM):
        scoring = "sideways"

    with pytest.raises(ValueError, match="Sideways declares scoring='sideways'.*diagnostics/methods.py"):
        scoring_method(Sideways)


@pytest.mark.parametrize("vocab,context,candidates,refused", [
    (1024, "prefix", None, False),  # AR exact in the prefix: V passes
    (1024, "sentence", None, True),  # AR exact inside sentences: V^2 = 1,048,576
    (300, "sentence", None, False),  # 90,000 passes: allowed
    (1024, "sentence", 50, False),  # restricted: always affordable
])
def test_exact_chain_rule_joints_are_refused_where_they_would_take_days(vocab, context, candidates, refused):
    cfg = evaluate_config([f"pair_context={context}", f"candidates={'null' if candidates is None else candidates}",
                           "checkpoint=x", "output_dir=."])
    method = METHODS["chain_rule"]
    if refused:
        with pytest.raises(ValueError, match="pair_context=prefix .*passes per pair, exact"):
            check_affordable(cfg, method, vocab)
    else:
        check_affordable(cfg, method, vocab)
    assert method.exact_sentence_passes(vocab) == vocab ** 2 and method.exact_prefix_passes(vocab) == vocab


def test_exact_mlm_tables_cost_2v_in_either_context():
    cfg = evaluate_config(["pair_context=sentence", "candidates=null", "checkpoint=x", "output_dir=."])
    method = METHODS["conditionals"]
    check_affordable(cfg, method, 8192)  # 16,384 passes
    too_large = MAX_EXACT_PASSES // 2 + 1
    with pytest.raises(ValueError, match="use candidates=K"):  # the prefix context would not be cheaper
        check_affordable(cfg, method, too_large)
