"""Pairwise constructions against their formulas evaluated by enumeration on a tiny vocabulary."""

import itertools
import math

import pytest
import torch

from armlm.diagnostics import joints

K = 6


def random_tables(seed: int, n: int = 3):
    g = torch.Generator().manual_seed(seed)
    logit_i = 2 * torch.randn(n, K, K, generator=g, dtype=torch.float64)
    logit_j = 2 * torch.randn(n, K, K, generator=g, dtype=torch.float64)
    log_mi = torch.randn(n, K, generator=g, dtype=torch.float64).log_softmax(-1)
    log_mj = torch.randn(n, K, generator=g, dtype=torch.float64).log_softmax(-1)
    return logit_i, logit_j, logit_i.log_softmax(-2), logit_j.log_softmax(-1), log_mi, log_mj


def compatible_tables(seed: int, n: int = 2):
    """Conditionals and marginals of a known (dependent) joint."""
    g = torch.Generator().manual_seed(seed)
    log_p = joints.normalise_joint(3 * torch.randn(n, K, K, generator=g, dtype=torch.float64))
    log_pi, log_pj = log_p.logsumexp(-1), log_p.logsumexp(-2)
    return log_p, log_p - log_pj[:, None, :], log_p - log_pi[:, :, None], log_pi, log_pj


def normalise(grid: dict) -> dict:
    total = sum(grid.values())
    return {key: value / total for key, value in grid.items()}


def brute(table: torch.Tensor, n: int, a: int, b: int) -> float:
    return math.exp(table[n, a, b].item())


def as_grid(log_p: torch.Tensor, n: int) -> dict:
    return {(a, b): brute(log_p, n, a, b) for a, b in itertools.product(range(K), repeat=2)}


def assert_grid_close(log_p: torch.Tensor, n: int, expected: dict) -> None:
    got = as_grid(log_p, n)
    for key in expected:
        assert got[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_construction_is_a_normalised_joint(seed):
    logit_i, logit_j, log_qi, log_qj, log_mi, log_mj = random_tables(seed)
    built = [joints.independent_joint(log_mi, log_mj), joints.mrf_joint(log_qi, log_qj),
             joints.mrf_logit_joint(logit_i, logit_j), joints.hcb_joint(log_qi, log_qj, log_mi.argmax(-1)),
             joints.ag_joint(log_qi, log_qj).log_p, joints.chain_rule_joint(log_mi, log_mj, log_qi, log_qj)]
    for log_p in built:
        assert log_p.shape == (3, K, K)
        torch.testing.assert_close(log_p.exp().sum((-2, -1)), torch.ones(3, dtype=torch.float64))


def test_mrf_hcb_chain_rule_and_independent_match_their_formulas():
    logit_i, logit_j, log_qi, log_qj, log_mi, log_mj = random_tables(3)
    qi, qj = log_qi.exp(), log_qj.exp()
    pivot = log_mi.argmax(-1)
    hcb = joints.hcb_joint(log_qi, log_qj, pivot)
    for n in range(3):
        pairs = list(itertools.product(range(K), repeat=2))
        p = int(pivot[n])
        assert_grid_close(joints.mrf_joint(log_qi, log_qj), n,
                          normalise({(a, b): qi[n, a, b].item() * qj[n, a, b].item() for a, b in pairs}))
        assert_grid_close(joints.mrf_logit_joint(logit_i, logit_j), n,
                          normalise({(a, b): math.exp(logit_i[n, a, b] + logit_j[n, a, b]) for a, b in pairs}))
        assert_grid_close(hcb, n, normalise({(a, b): (qi[n, a, b] / qi[n, p, b] * qj[n, p, b]).item()
                                             for a, b in pairs}))
        mi, mj = log_mi[n].exp(), log_mj[n].exp()
        assert_grid_close(joints.independent_joint(log_mi, log_mj), n,
                          {(a, b): (mi[a] * mj[b]).item() for a, b in pairs})
        assert_grid_close(joints.chain_rule_joint(log_mi, log_mj, log_qi, log_qj), n,
                          {(a, b): 0.5 * (mi[a] * qj[n, a, b] + mj[b] * qi[n, a, b]).item() for a, b in pairs})


def ag_step(p: dict, qi: torch.Tensor, qj: torch.Tensor) -> dict:
    """One Arnold-Gokhale update written out over the grid."""
    p_i = {a: sum(p[a, b] for b in range(K)) for a in range(K)}
    p_j = {b: sum(p[a, b] for a in range(K)) for b in range(K)}
    return normalise({(a, b): (qi[a, b] + qj[a, b]).item() / (1 / p_i[a] + 1 / p_j[b])
                      for a, b in itertools.product(range(K), repeat=2)})


def test_ag_is_its_iteration_run_by_enumeration_and_converges_to_a_fixed_point():
    _, _, log_qi, log_qj, _, _ = random_tables(4, n=1)
    qi, qj = log_qi[0].exp(), log_qj[0].exp()
    p = {key: 1 / K**2 for key in itertools.product(range(K), repeat=2)}
    for _ in range(5):
        p = ag_step(p, qi, qj)
    assert_grid_close(joints.ag_joint(log_qi, log_qj, tol=0.0, max_iter=5).log_p, 0, p)

    result = joints.ag_joint(log_qi, log_qj, tol=1e-12, max_iter=5000)
    assert bool(result.converged[0]) and 5 < int(result.iterations[0]) < 5000
    fixed = as_grid(result.log_p, 0)
    stepped = ag_step(fixed, qi, qj)
    assert max(abs(stepped[key] - fixed[key]) for key in fixed) < 1e-10


@pytest.mark.parametrize("seed", range(5))
def test_ag_conditionals_are_closest_to_the_mlm(seed):
    logit_i, logit_j, log_qi, log_qj, log_mi, log_mj = random_tables(10 + seed, n=4)
    ag = joints.joint_metrics(joints.ag_joint(log_qi, log_qj, tol=1e-10, max_iter=5000).log_p, log_qi, log_qj)
    others = [joints.mrf_joint(log_qi, log_qj), joints.mrf_logit_joint(logit_i, logit_j),
              joints.hcb_joint(log_qi, log_qj, log_mi.argmax(-1)), joints.independent_joint(log_mi, log_mj),
              joints.chain_rule_joint(log_mi, log_mj, log_qi, log_qj)]
    for log_p in others:
        other = joints.joint_metrics(log_p, log_qi, log_qj)
        assert (ag.kl_all <= other.kl_all + 1e-9).all()


def test_compatible_conditionals_are_recovered_by_hcb_ag_and_chain_rule():
    log_p, log_qi, log_qj, log_pi, log_pj = compatible_tables(5)
    for pivot in range(K):
        torch.testing.assert_close(joints.hcb_joint(log_qi, log_qj, torch.full((2,), pivot)), log_p)
    torch.testing.assert_close(joints.ag_joint(log_qi, log_qj, tol=1e-13, max_iter=20000).log_p.exp(),
                               log_p.exp(), atol=1e-9, rtol=0)
    torch.testing.assert_close(joints.chain_rule_joint(log_pi, log_pj, log_qi, log_qj), log_p)
    assert (joints.incompatibility(log_qi, log_qj) < 1e-20).all()
    # MRF cannot recover a dependent joint: its product of conditionals is p^2 / (p_i p_j), normalised.
    mrf = joints.mrf_joint(log_qi, log_qj)
    torch.testing.assert_close(mrf, joints.normalise_joint(2 * log_p - log_pi[:, :, None] - log_pj[:, None, :]))
    assert (mrf - log_p).abs().max() > 0.1
    # Nor can independence: it only has the marginals.
    assert (joints.independent_joint(log_pi, log_pj) - log_p).abs().max() > 0.1


def test_an_independent_joint_is_recovered_by_every_construction():
    g = torch.Generator().manual_seed(6)
    log_pi = torch.randn(1, K, generator=g, dtype=torch.float64).log_softmax(-1)
    log_pj = torch.randn(1, K, generator=g, dtype=torch.float64).log_softmax(-1)
    log_p = log_pi[:, :, None] + log_pj[:, None, :]
    log_qi, log_qj = log_p - log_pj[:, None, :], log_p - log_pi[:, :, None]
    ag = joints.ag_joint(log_qi, log_qj, tol=1e-13, max_iter=5000).log_p
    for built in (joints.independent_joint(log_pi, log_pj), joints.mrf_joint(log_qi, log_qj),
                  joints.hcb_joint(log_qi, log_qj, torch.tensor([2])), ag,
                  joints.chain_rule_joint(log_pi, log_pj, log_qi, log_qj)):
        torch.testing.assert_close(built, log_p)
    assert joints.pointwise_dependence(log_p).abs().max() < 1e-12


def test_metrics_match_their_definitions():
    logit_i, logit_j, log_qi, log_qj, log_mi, log_mj = random_tables(7, n=2)
    log_p = joints.mrf_logit_joint(logit_i, logit_j)
    metrics = joints.joint_metrics(log_p, log_qi, log_qj, gold_a=1, gold_b=2)
    for n in range(2):
        p = as_grid(log_p, n)
        col = {b: sum(p[a, b] for a in range(K)) for b in range(K)}
        row = {a: sum(p[a, b] for b in range(K)) for a in range(K)}

        def kl_i(b):  # KL(q_{i|j}(.|b) || p_{i|j}(.|b))
            return sum(q * math.log(q / (p[a, b] / col[b])) for a in range(K) if (q := brute(log_qi, n, a, b)))

        def kl_j(a):
            return sum(q * math.log(q / (p[a, b] / row[a])) for b in range(K) if (q := brute(log_qj, n, a, b)))

        assert metrics.pair_nll[n].item() == pytest.approx(-0.5 * math.log(p[1, 2]))
        unary = math.log(p[1, 2] / col[2]) + math.log(p[1, 2] / row[1])
        assert metrics.unary_nll[n].item() == pytest.approx(-0.5 * unary)
        assert metrics.kl_all[n].item() == pytest.approx(sum(kl_i(v) + kl_j(v) for v in range(K)) / (2 * K))
        assert metrics.kl_gold[n].item() == pytest.approx(0.5 * (kl_i(2) + kl_j(1)))
        pmi = math.log(p[1, 2] / (row[1] * col[2]))
        assert joints.pointwise_dependence(log_p, 1, 2)[n].item() == pytest.approx(pmi)
    means = metrics.means()
    assert means["p_ppl"] == pytest.approx(math.exp(metrics.pair_nll.mean().item()))


def test_incompatibility_matches_its_formula_and_is_positive_for_random_tables():
    _, _, log_qi, log_qj, _, _ = random_tables(8, n=1)
    c = {(a, b): (log_qi[0, a, b] - log_qj[0, a, b]).item() for a, b in itertools.product(range(K), repeat=2)}

    def lse(values):
        return math.log(sum(math.exp(v) for v in values))
    total = lse(c.values())
    expected = sum((c[a, b] + total - lse(c[a, x] for x in range(K)) - lse(c[x, b] for x in range(K))) ** 2
                   for a, b in c) / K**2
    got = joints.incompatibility(log_qi, log_qj)[0].item()
    assert got == pytest.approx(expected) and got > 0.1
