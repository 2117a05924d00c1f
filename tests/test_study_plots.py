"""The findings picture: each row's interval where the table says, beside its claim's registered bounds."""

import pandas as pd
import pytest
from matplotlib.figure import Figure

from armlm.analysis.findings.verdicts import Claim
from armlm.analysis.reports.study_plots import VERDICT_COLOURS, claim_bounds, plot_findings


@pytest.mark.parametrize("kind, direction, bounds", [
    ("non_inferiority", "greater", [-0.02]), ("non_inferiority", "less", [0.02]),
    ("equivalence", "greater", [-0.02, 0.02]), ("superiority", "greater", [0.005]), ("superiority", "less", [-0.005]),
])
def test_a_claims_bounds_are_where_its_region_ends(kind, direction, bounds):
    margin = 0.0 if kind == "superiority" else 0.02
    assert claim_bounds(Claim(kind, direction, 0.005 if kind == "superiority" else 0.02, margin)) == bounds


def test_each_finding_is_a_row_with_its_interval_its_bounds_and_its_verdicts_colour():
    table = pd.DataFrame([  # Z1 and Z2 of the zero-shot record, and a row with no seeds yet (not drawn)
        {"finding": "Z1", "kind": "non_inferiority", "direction": "greater", "margin": 0.02, "smallest_effect": 0.02,
         "difference": -0.052, "ci_low": -0.064, "ci_high": -0.041, "verdict": "contradicted"},
        {"finding": "Z2", "kind": "superiority", "direction": "greater", "margin": 0.0, "smallest_effect": 0.005,
         "difference": 0.004, "ci_low": 0.001, "ci_high": 0.007, "verdict": "reproduced"},
        {"finding": "C3", "kind": "non_inferiority", "direction": "greater", "margin": 0.02, "smallest_effect": 0.02,
         "difference": float("nan"), "ci_low": float("nan"), "ci_high": float("nan"), "verdict": "interim"},
    ])
    ax = Figure().subplots()
    plot_findings(table, ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Z1: contradicted", "Z2: reproduced"]
    bars = list(ax.containers)
    assert len(bars) == 2
    z1_point, _, (z1_bar,) = bars[0].lines  # the marker, its caps, its horizontal bar
    assert z1_point.get_xdata()[0] == pytest.approx(-0.052) and z1_point.get_color() == VERDICT_COLOURS["contradicted"]
    assert sorted(x for seg in z1_bar.get_segments() for x, _ in seg) == pytest.approx([-0.064, -0.041])
    dotted = sorted((line.get_xdata()[0], sum(line.get_ydata()) / 2) for line in ax.lines if line.get_linestyle() == ":")
    assert [x for x, _ in dotted] == pytest.approx([-0.02, 0.005])
    assert [y for _, y in dotted] == pytest.approx([0.0, 1.0])  # each bound on its own row
    assert ax.get_ylim() == (1.5, -0.5)  # the table's order, top to bottom
