"""The diagnostics report as Markdown tables and as TensorBoard scalars.

Tags are the same for every checkpoint scored the same way, and the ones every scoring method has (the
headline joint's P-PPL and U-PPL, the independence gap) are shared, so AR and MLM runs overlay in TensorBoard.
The sequence scores are different quantities and keep different tags:

    diagnostics/sequence/ppl                 AR perplexity (exact chain rule)
    diagnostics/sequence/pseudo_ppl          MLM pseudo-perplexity (one token masked at a time; not a likelihood)
    diagnostics/likelihood/{nll_per_token,ppl}   every objective, the same held-out blocks: AR exact, a
                                             bidirectional checkpoint's any-order upper bound (report: kind)
    diagnostics/likelihood/mc_stderr         the bound's Monte-Carlo standard error (0 when exact)
    diagnostics/likelihood/nll_per_token_without_eod   the same over the targets that are not [EOD]
    diagnostics/likelihood/unigram_nll_per_token_without_eod   the train split's unigram on those targets
    diagnostics/likelihood/below_unigram     that unigram minus nll_per_token_without_eod (every objective)
    diagnostics/<kind>/joint/{p_ppl,u_ppl}   AR: its exact joint; MLM: AG
    diagnostics/<kind>/gap                   mean pointwise dependence of the gold pairs under that joint
    diagnostics/<kind>/gap_by_distance       the same, step = the smallest distance of each bin
    diagnostics/<kind>/<row>/<metric>        every row of the table (MLM: mlm, mrf, mrf_logit, hcb, ag, ...)
    diagnostics/<kind>/incompatibility       MLM only
    diagnostics/representations/shift_{cosine,cka}@<k>   step = layer (1 = first block)
    diagnostics/representations/shift_left_{cosine,cka}@<k>   the same with every [MASK] left of the tokens
                                                         read (the same masks for causal and bidirectional)
    diagnostics/representations/shift_left_random_{cosine,cka}@<k>   the control: random ordinary tokens there
    diagnostics/representations/<geometry metric>        step = layer: anisotropy_{raw,centred,standardised},
                                                         self_similarity_{same_type,different_types}
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


def _known(value: Any) -> Any:
    return "?" if value is None else value  # None: unknown to the writer (a report rewritten from before the key)


def markdown_report(report: dict[str, Any]) -> str:
    lines = [f"# Diagnostics: {report['objective']} ({report['checkpoint']})", "",
             f"{report['corpus']}, {report['split']} split; seed {report['seed']}; {report['wall_seconds']:.0f} s.", ""]
    if "likelihood" in report:
        lines += likelihood_markdown(report["likelihood"])
    if "pairwise" in report:
        lines += independence_markdown(report)
    if "representations" in report:
        lines += representations_markdown(report["representations"])
    return "\n".join(lines)


def representations_markdown(part: dict[str, Any]) -> list[str]:
    rates = list(part["shift"])
    left = part["shift_left"]
    header = ["layer", *(f"{name} k={k}" for k in rates for name in ("cos", "CKA")),
              *(f"left {name} k={k}" for k in left for name in ("cos", "CKA")),
              "aniso raw", "aniso centred", "aniso std", "self-sim same type", "self-sim other types"]
    seen = "; ".join(f"k={k}: {part['shift_left_read_tokens'][k]} tokens read, {part['shift_left_masks_seen'][k]:.2f} "
                     "masks seen by each on average" for k in left)
    lines = [f"## Representations ({part['sentences']} sentences, {part['tokens']} tokens)", "",
             "Shift: clean vs k of the other tokens replaced by [MASK], states of the unchanged tokens. "
             + ("Left shift: k of the tokens before a random cut replaced by [MASK], states of the tokens after "
                f"it, which see every mask under causal and bidirectional attention alike ({seen}). " if left else "")
             + "Geometry: mean cosine of random token pairs from different sentences (anisotropy), and of "
             "occurrences of one subword type in different sentences vs of different types.", "",
             "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for index, geometry in enumerate(part["geometry"]):
        shift = [part["shift"][k][index][name] for k in rates for name in ("cosine", "cka")]
        shift += [left[k][index][name] for k in left for name in ("cosine", "cka")]
        geo = [geometry[f"anisotropy_{n}"] for n in ("raw", "centred", "standardised")]
        geo += [geometry["self_similarity_same_type"], geometry["self_similarity_different_types"]]
        lines.append(f"| {geometry['layer']} | " + " | ".join(_cell(v) for v in [*shift, *geo]) + " |")
    return [*lines, ""]


def likelihood_markdown(part: dict[str, Any]) -> list[str]:
    exact = part["kind"] == "exact"
    how = ("exact (chain rule)" if exact else
           f"upper bound (any-order, {part['strata']} strata x {part['draws']} draws per block; Monte-Carlo "
           f"standard error {part['mc_stderr']:.4f} nats, {part['rel_mc_stderr']:.2%}"
           + ("" if part["target_met"] else ", ABOVE the target: raise likelihood.max_draws") + ")")
    without = part["nll_per_token_without_eod"]
    return [f"## Likelihood on held-out blocks ({part['blocks']} blocks of {part['block_size']} tokens, "
            f"{part['target_tokens']} target tokens: every position after [CLS], {_known(part['eod_targets'])} of "
            f"them [EOD]; blocks {_known(part['blocks_fingerprint'])})", "",
            "| kind | NLL per token | perplexity | without the [EOD] targets | standard error over blocks |",
            "|---|---|---|---|---|",
            f"| {how} | {part['nll_per_token']:.4f} | {part['ppl']:.2f} | "
            f"{'-' if without is None else f'{without:.4f}'} | {part['blocks_stderr']:.4f} |", "",
            *unigram_markdown(part)]


def unigram_markdown(part: dict[str, Any]) -> list[str]:
    """The train split's unigram on the same non-[EOD] targets, and how far below it the model is (nothing where
    the report does not hold it)."""
    if part["unigram_nll_per_token_without_eod"] is None:
        return []
    return [f"Train-split unigram (add-1/2 over every id but [PAD], [CLS], [SEP], [MASK], [EOD]) of the same "
            f"targets that are not [EOD]: {part['unigram_nll_per_token_without_eod']:.4f} nats per token; the "
            f"model is {part['below_unigram']:.4f} nats below the unigram.", ""]


PERPLEXITY_LABELS = {"ppl": "perplexity", "pseudo_ppl": "pseudo-perplexity"}


def independence_markdown(report: dict[str, Any]) -> list[str]:
    seq = report["sequence"]
    kind = seq["perplexity_kind"]
    seq_line = f"{PERPLEXITY_LABELS.get(kind, kind)} {seq[kind]:.2f}"
    k = report["candidates"]
    candidates = f"those of {report['candidates_from']}" if report.get("candidates_from") else (k or "all (exact)")
    context = ("each pair's sentence cut after its second token" if report["pair_context"] == "prefix"
               else "each pair's whole sentence")
    comparable = ("Exact tables: these P-PPL, U-PPL and gaps are this checkpoint's own and compare across "
                  "checkpoints with the same tokenizer and pairs." if k is None else
                  f"Restricted to {k} candidates: every figure depends on the candidate sets (renormalising "
                  "inside K x K flatters the gold pair), so none compares across checkpoints; use the exact "
                  "mode (candidates=null) on a small vocabulary for that.")
    lines = [f"Independence: {report['pairs_per_kind']} pairs per kind; candidates per position: {candidates}; "
             f"vocabulary {report['vocab_size']}; context: {context}.", "", comparable, "",
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
    return lines


def tensorboard_scalars(report: dict[str, Any]) -> Iterator[tuple[str, float, int]]:
    if "representations" in report:
        part = report["representations"]
        for section in ("shift", "shift_left", "shift_left_random"):
            for k, layers in part[section].items():
                for row in layers:
                    yield f"diagnostics/representations/{section}_cosine@{k}", row["cosine"], row["layer"]
                    yield f"diagnostics/representations/{section}_cka@{k}", row["cka"], row["layer"]
        for row in part["geometry"]:
            for metric, value in row.items():
                if metric != "layer":
                    yield f"diagnostics/representations/{metric}", value, row["layer"]
    if "likelihood" in report:
        part = report["likelihood"]
        for metric in ("nll_per_token", "ppl", "mc_stderr", "nll_per_token_without_eod",
                       "unigram_nll_per_token_without_eod", "below_unigram"):
            if part[metric] is not None:  # None: a report from before the key
                yield f"diagnostics/likelihood/{metric}", part[metric], 0
    if "sequence" not in report:
        return
    seq = report["sequence"]
    kind = seq["perplexity_kind"]
    yield f"diagnostics/sequence/{kind}", seq[kind], 0
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
