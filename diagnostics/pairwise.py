"""Every construction and metric over a set of pairs, for an MLM or an AR checkpoint.

Pairs are processed one sentence at a time (their forward passes are one batch each) and the
constructions in chunks of pairs (the V x V work is batched too). Per-pair figures are kept so the
independence gap can be read against distance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import Tensor
from tqdm import tqdm

from armlm.diagnostics import joints
from armlm.diagnostics.sentences import Pair
from armlm.diagnostics.tables import Candidates, PairTables, ar_pair_joint, mlm_pair_tables

MLM_CONSTRUCTIONS = ("mlm", "mrf", "mrf_logit", "hcb", "ag", "chain_rule")
MLM_UNARY = "mlm_unary"  # the MLM's own conditionals: the U-PPL reference row
DISTANCE_BINS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 10_000))


def distance_bins(distances: Tensor) -> list[tuple[int, str, Tensor]]:
    """(smallest distance, label, members) of every non-empty bin of DISTANCE_BINS."""
    out = []
    for low, high in DISTANCE_BINS:
        inside = (distances >= low) & (distances <= high)
        if inside.any():
            label = str(low) if low == high else (f"{low}-{high}" if high < 10_000 else f">={low}")
            out.append((low, label, inside))
    return out


@dataclass
class PairwiseResult:
    kind: str  # contiguous | random
    distances: Tensor  # (N,)
    metrics: dict[str, joints.PairMetrics]  # row name -> per-pair figures
    gaps: dict[str, Tensor]  # joint name -> per-pair pointwise dependence of the gold pair
    incompatibility: Tensor | None = None  # (N,) MLM only
    ag_iterations: Tensor | None = None
    ag_converged: Tensor | None = None
    seconds: float = 0.0
    passes: int = 0
    pairs: list[Pair] = field(default_factory=list)
    candidates: list[Candidates] = field(default_factory=list)  # per pair, as used

    def table(self) -> dict[str, dict[str, float]]:
        rows = {name: m.means() for name, m in self.metrics.items()}
        if MLM_UNARY in rows:
            rows[MLM_UNARY].pop("p_ppl")  # the unary row has no joint
        return rows

    def gap_by_distance(self, joint: str) -> list[dict[str, float]]:
        return [{"low": low, "distance": label, "pairs": int(inside.sum()),
                 "mean_gap": self.gaps[joint][inside].mean().item()}
                for low, label, inside in distance_bins(self.distances)]

    def summary(self, headline: str) -> dict:
        out = {"pairs": len(self.distances), "rows": self.table(),
               "gap_mean": {name: gap.mean().item() for name, gap in self.gaps.items()},
               "gap_by_distance": self.gap_by_distance(headline), "headline_joint": headline,
               "seconds": round(self.seconds, 2), "forward_passes": self.passes,
               "per_pair": {"pair": [[p.sentence, p.i, p.j] for p in self.pairs],
                            "cand_i": [c[0].tolist() for c in self.candidates],
                            "cand_j": [c[1].tolist() for c in self.candidates],
                            "distance": self.distances.tolist(),
                            "gap": {name: gap.tolist() for name, gap in self.gaps.items()},
                            "pair_nll": {name: m.pair_nll.tolist() for name, m in self.metrics.items()
                                         if name != MLM_UNARY}}}
        if self.incompatibility is not None:
            out["incompatibility"] = self.incompatibility.mean().item()
        if self.ag_iterations is not None and self.ag_converged is not None:
            out["ag_iterations"] = {"mean": self.ag_iterations.double().mean().item(),
                                    "max": int(self.ag_iterations.max()),
                                    "not_converged": int((~self.ag_converged).sum())}
        return out


def mlm_joints(tables: PairTables, log_qi: Tensor, log_qj: Tensor, ag_tol: float,
               ag_max_iter: int) -> tuple[dict[str, Tensor], joints.AGResult]:
    """Every MLM construction; `log_qi`, `log_qj` are the tables' normalised conditionals, computed once
    by the caller because the metrics read them too."""
    ag = joints.ag_joint(log_qi, log_qj, tol=ag_tol, max_iter=ag_max_iter)
    built = {
        "mlm": joints.independent_joint(tables.log_mi, tables.log_mj),
        "mrf": joints.mrf_joint(log_qi, log_qj),
        "mrf_logit": joints.mrf_logit_joint(tables.logit_i, tables.logit_j),
        # The authors' pivot: the most likely token at i with both positions masked.
        "hcb": joints.hcb_joint(log_qi, log_qj, pivot=tables.log_mi.argmax(-1)),
        "ag": ag.log_p,
        "chain_rule": joints.chain_rule_joint(tables.log_mi, tables.log_mj, log_qi, log_qj),
    }
    return built, ag


def _concat(parts: list[dict[str, joints.PairMetrics]]) -> dict[str, joints.PairMetrics]:
    def cat(values: list[Tensor | None]) -> Tensor | None:
        return None if values[0] is None else torch.cat(values)  # type: ignore[arg-type]
    return {name: joints.PairMetrics(*(cat([getattr(p[name], f) for p in parts])
                                       for f in joints.PairMetrics.__dataclass_fields__))
            for name in parts[0]}


def mlm_pairwise(model, sentences: list[list[int]], pairs: list[Pair], mask_id: int, ordinary: Tensor,
                 k: int | None, ag_tol: float = 1e-8, ag_max_iter: int = 1000, chunk: int = 16,
                 given: list[Candidates] | None = None) -> PairwiseResult:
    """All MLM constructions and metrics over `pairs` (all of one kind); `given` fixes each pair's
    candidates (another checkpoint's), otherwise the model chooses k of its own."""
    start, passes_before = time.perf_counter(), getattr(model, "passes", 0)
    metric_parts, gaps, incompat, iterations, converged = [], {n: [] for n in MLM_CONSTRUCTIONS}, [], [], []
    pending: list[PairTables] = []
    used: list[Candidates] = []

    def flush() -> None:
        tables = PairTables.stack(pending)
        log_qi, log_qj = tables.log_qi, tables.log_qj
        built, ag = mlm_joints(tables, log_qi, log_qj, ag_tol, ag_max_iter)
        part = {name: joints.joint_metrics(log_p, log_qi, log_qj) for name, log_p in built.items()}
        part[MLM_UNARY] = joints.unary_metrics(log_qi, log_qj)
        metric_parts.append(part)
        for name, log_p in built.items():
            gaps[name].append(joints.pointwise_dependence(log_p))
        incompat.append(joints.incompatibility(log_qi, log_qj))
        iterations.append(ag.iterations)
        converged.append(ag.converged)
        pending.clear()

    kind = pairs[0].kind
    for n, pair in enumerate(tqdm(pairs, desc=f"MLM {kind} pairs", unit="pair")):
        tables = mlm_pair_tables(model, sentences[pair.sentence], pair, mask_id, ordinary, k,
                                 None if given is None else given[n])
        pending.append(tables)
        used.append((tables.cand_i[0], tables.cand_j[0]))
        if len(pending) == chunk:
            flush()
    if pending:
        flush()
    return PairwiseResult(kind, torch.tensor([p.distance for p in pairs]), _concat(metric_parts),
                          {n: torch.cat(g) for n, g in gaps.items()}, torch.cat(incompat),
                          torch.cat(iterations), torch.cat(converged), time.perf_counter() - start,
                          getattr(model, "passes", 0) - passes_before, pairs, used)


def ar_pairwise(model, sentences: list[list[int]], pairs: list[Pair], ordinary: Tensor,
                k: int | None, given: list[Candidates] | None = None) -> PairwiseResult:
    """The AR model's exact joint over the candidates for every pair: its P-PPL, the U-PPL of its
    conditionals and the pointwise dependence of the gold pair."""
    start, passes_before = time.perf_counter(), getattr(model, "passes", 0)
    metric_parts, gaps, used = [], [], []
    for n, pair in enumerate(tqdm(pairs, desc=f"AR {pairs[0].kind} pairs", unit="pair")):
        ids = sentences[pair.sentence]
        logits = model.next_token_logits(torch.tensor(ids))
        joint = ar_pair_joint(model, logits, ids, pair, ordinary, k, None if given is None else given[n])
        used.append((joint.cand_i[0], joint.cand_j[0]))
        metric_parts.append({"ar_exact": joints.joint_metrics(joint.log_p)})
        gaps.append(joints.pointwise_dependence(joint.log_p))
    return PairwiseResult(pairs[0].kind, torch.tensor([p.distance for p in pairs]), _concat(metric_parts),
                          {"ar_exact": torch.cat(gaps)}, seconds=time.perf_counter() - start,
                          passes=getattr(model, "passes", 0) - passes_before, pairs=pairs, candidates=used)
