"""`trainer=ddp` through Hydra: Lightning starts the command again for each further rank (train.py, or
`python -m armlm.__main__`); both ranks must share one run folder and the token accounting must sum over ranks. Two
CPU processes (gloo) stand in for two GPUs. tests/test_install.py runs one through an installed console script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_two_ranks_share_one_folder_count_both_and_match_one_process_with_the_same_global_batch(tmp_path, cache_dir):
    """AR (no random corruption) with dropout off: 2 ranks x batch 4 and 1 process x batch 8 see the same
    examples at every step (seeded sampler), so the weights agree up to float summation order. The two ranks run
    through `python -m armlm train` from a folder outside the checkout: Lightning starts the second rank as
    `python -m armlm.__main__ <settings>`, without the command's name (common.commands.rank_argv gives it back); both
    write one run folder, and its token count sums over them. The control, a global batch of 4, runs on two ranks
    through train.py, which Lightning starts again as `python train.py <settings>` (a study's DDP stage is launched
    so)."""
    import torch

    common = ["experiment=smoke", "objective=ar", "model.dropout=0.0", "trainer.accelerator=cpu",
              "trainer.precision=32-true", "trainer.max_steps=4", "trainer.val_check_interval=2",
              "trainer.enable_progress_bar=false", f"data.cache_dir={cache_dir}"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    runs = {"ddp": (["-m", "armlm", "train", "trainer=ddp", "trainer.devices=2", "data.batch_size=4"], elsewhere),
            "single": (["train.py", "trainer.devices=1", "data.batch_size=8"], REPO),
            # other examples (a global batch of 4): must not match
            "half_batch": (["train.py", "trainer=ddp", "trainer.devices=2", "data.batch_size=2"], REPO)}
    weights = {}
    for name, (command, cwd) in runs.items():
        run_dir = (elsewhere if name == "ddp" else tmp_path) / name
        result = subprocess.run([sys.executable, *command, *common, f"hydra.run.dir={run_dir}"], cwd=cwd,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        weights[name] = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    summary = json.loads((elsewhere / "ddp" / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["tokens_seen"] == 2 * 4 * 4 * 64  # two ranks x steps x batch x block
    assert json.loads((tmp_path / "half_batch" / "summary.json").read_text())["tokens_seen"] == 2 * 4 * 2 * 64
    assert [p.name for p in elsewhere.iterdir()] == ["ddp"]  # no second folder from the relaunched rank
    assert weights["ddp"].keys() == weights["single"].keys()
    for key, value in weights["ddp"].items():
        torch.testing.assert_close(value, weights["single"][key], atol=2e-5, rtol=1e-4, msg=key)
    # The tolerance discriminates: a run that saw other examples is far outside it.
    def largest_difference(a: str, b: str) -> float:
        return max((weights[a][k] - v).abs().max().item() for k, v in weights[b].items())

    assert largest_difference("half_batch", "single") > 20 * max(largest_difference("ddp", "single"), 1e-6)
