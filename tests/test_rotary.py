"""models.rotary: the rotate-half form is RoFormer's rotation of complex pairs (GPT-NeoX's pairing of dimension i with
i + d/2; RoFormer's eq. 34 pairs neighbours 2i, 2i+1, the same up to a fixed permutation of dimensions, so the oracle
checks the angles and the turn, not the pairing), and rotated queries and keys score by their relative position
only."""

import torch

from armlm.models.rotary import Rotary


def complex_oracle(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Su et al. (2021) eq. 34 as complex arithmetic, in the rotate-half pairing: pair i is (x_i, x_{i+d/2}), turned
    by angle m * base^(-2i/d)."""
    half = x.shape[-1] // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    turned = torch.complex(x[..., :half].double(), x[..., half:].double()) * torch.polar(
        torch.ones(len(positions), half, dtype=torch.float64), positions.double()[:, None] * theta)
    return torch.cat([turned.real, turned.imag], dim=-1).float()


def test_rotary_turns_each_pair_by_its_positions_angle():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8)  # (B, H, T, head_dim)
    rotary = Rotary(8, max_len=32)
    assert torch.allclose(rotary(x), complex_oracle(x, torch.arange(7)), atol=1e-5)
    # explicit positions (a document's own, restarting at 0): each row turned by its own
    positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3], [5, 6, 7, 8, 9, 10, 11]])
    out = rotary(x, positions)
    for row in range(2):
        assert torch.allclose(out[row], complex_oracle(x[row], positions[row]), atol=1e-5)


def test_rotated_scores_depend_on_relative_position_only():
    torch.manual_seed(1)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    rotary = Rotary(16, max_len=64)

    def score(m: int, n: int) -> float:
        return float((rotary(q, torch.tensor([[m]])) * rotary(k, torch.tensor([[n]]))).sum())

    assert abs(score(10, 3) - score(40, 33)) < 1e-4 and abs(score(0, 0) - score(50, 50)) < 1e-4
    assert abs(score(10, 3) - score(10, 4)) > 1e-3  # and it does depend on the offset
