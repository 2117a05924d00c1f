"""The diagnostics report as Markdown tables and as TensorBoard scalars.

Tags are the same for every checkpoint of a family, and the ones both families have (the sequence
perplexity, the headline joint's P-PPL and U-PPL, the independence gap) are shared, so AR and MLM runs
overlay in TensorBoard:

    diagnostics/sequence/ppl                 AR perplexity | MLM pseudo-perplexity
    diagnostics/<kind>/joint/{p_ppl,u_ppl}   AR: its exact joint; MLM: AG
    diagnostics/<kind>/gap                   mean pointwise dependence of the gold pairs under that joint
    diagnostics/<kind>/gap_by_distance       the same, step = the smallest distance of each bin
    diagnostics/<kind>/<row>/<metric>        every row of the table (MLM: mlm, mrf, mrf_logit, hcb, ag, ...)
    diagnostics/<kind>/incompatibility       MLM only
"""

from __future__ import annotations

from typing import Any, Iterator

ROW_LABELS = {
    "mlm_unary": "MLM unary conditionals (reference)",
    "mlm": "MLM (independent: mask both)",
    "mrf": "MRF",
    "mrf_logit": "MRF (logits)",
    "hcb": "HCB",
    "ag": "AG",
    "chain_rule": "chain-rule MLM",
    "ar_exact": "AR exact joint",
}
COLUMNS = (("p_ppl", "P-PPL"), ("u_ppl", "U-PPL"), ("kl_all", "KL all"), ("kl_gold", "KL gold"))


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown_report(report: dict[str, Any]) -> str:
    seq = report["sequence"]
    seq_line = (f"perplexity {seq['ppl']:.2f}" if "ppl" in seq else f"pseudo-perplexity {seq['pseudo_ppl']:.2f}")
    k = report["candidates"]
    candidates = f"those of {report['candidates_from']}" if report.get("candidates_from") else (k or "all (exact)")
    lines = [f"# Diagnostics: {report['objective']} ({report['checkpoint']})", "",
             f"{report['corpus']}, {report['split']} split; {report['pairs_per_kind']} pairs per kind; "
             f"candidates per position: {candidates}; vocabulary {report['vocab_size']}; "
             f"seed {report['seed']}; {report['wall_seconds']:.0f} s.", "",
             f"Sequence score over {seq['sentences']} sentences ({seq['tokens']} tokens): {seq_line}.", ""]
    for kind, part in report["pairwise"].items():
        lines += [f"## {kind} pairs ({part['pairs']})", "",
                  "| construction | " + " | ".join(label for _, label in COLUMNS) + " |",
                  "|---" * (len(COLUMNS) + 1) + "|"]
        for name, row in part["rows"].items():
            cells = " | ".join(_cell(row.get(key)) for key, _ in COLUMNS)
            lines.append(f"| {ROW_LABELS.get(name, name)} | {cells} |")
        lines.append("")
        extras = [f"{part['forward_passes']} forward passes, {part['seconds']:.1f} s"]
        if "incompatibility" in part:
            extras.append(f"incompatibility of the MLM's conditionals {part['incompatibility']:.4f}")
        if "ag_iterations" in part:
            it = part["ag_iterations"]
            extras.append(f"AG iterations mean {it['mean']:.1f}, max {it['max']}, not converged {it['not_converged']}")
        lines += ["; ".join(extras) + ".", "",
                  f"Independence gap (log p(a,b) - log p(a) - log p(b) of the gold pair under "
                  f"{ROW_LABELS[part['headline_joint']]}), by distance:", "",
                  "| distance | pairs | mean gap (nats) |", "|---|---|---|"]
        lines += [f"| {b['distance']} | {b['pairs']} | {b['mean_gap']:.3f} |" for b in part["gap_by_distance"]]
        lines.append("")
    return "\n".join(lines)


def tensorboard_scalars(report: dict[str, Any]) -> Iterator[tuple[str, float, int]]:
    seq = report["sequence"]
    yield "diagnostics/sequence/ppl", seq.get("ppl", seq.get("pseudo_ppl")), 0
    for kind, part in report["pairwise"].items():
        prefix = f"diagnostics/{kind}"
        headline = part["rows"][part["headline_joint"]]
        yield f"{prefix}/joint/p_ppl", headline["p_ppl"], 0
        yield f"{prefix}/joint/u_ppl", headline["u_ppl"], 0
        yield f"{prefix}/gap", part["gap_mean"][part["headline_joint"]], 0
        for bin_ in part["gap_by_distance"]:
            yield f"{prefix}/gap_by_distance", bin_["mean_gap"], bin_["low"]
        for name, row in part["rows"].items():
            for metric, value in row.items():
                yield f"{prefix}/{name}/{metric}", value, 0
        if "incompatibility" in part:
            yield f"{prefix}/incompatibility", part["incompatibility"], 0
