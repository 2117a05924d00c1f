"""The training step as one compiled graph, and the peak FLOP/s that its utilisation is read against.

`compile_loss` compiles an objective's whole loss over the backbone (corruption, every head, the LM-head loss) with
`fullgraph=True`: a graph break is an error, not a silent fallback. The backward pass is not called inside it:
AOTAutograd traces the backward of the same graph when the forward is compiled, so `loss.backward()` runs a compiled
backward graph. What makes every objective traceable: no generator argument (the step seeds the global stream,
training.lit_module), row selections that keep every row (models.rows), schedules held in tensors
(objectives.masked_next_token), and no host read inside (tests/test_compiled_step.py proves each objective).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from armlm.common.errors import ArmlmError
from armlm.models.backbone import Transformer
from armlm.objectives.base import Batch, LossOutput, Objective

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Dense bf16 tensor-core FLOP/s of the data sheets, by a substring of torch.cuda.get_device_name: what train/mfu is
# a share of when mfu_peak_flops is not given. The first match wins (H100 PCIe before H100's SXM figure).
DATASHEET_BF16_PEAKS = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12),
                        ("A100", 312e12))


def compile_loss(objective: Objective, model: Transformer, *, mode: str = "default",
                 backend: str = "inductor") -> Callable[[Batch], LossOutput]:
    """`batch -> objective.loss(batch, model)` compiled as one graph. `mode`: torch.compile's ("reduce-overhead"
    replays CUDA graphs, for small models whose steps are launch-bound); `backend`: "inductor" generates kernels,
    "aot_eager" traces forward and backward without a compiler (what the CPU proofs use)."""
    if mode not in COMPILE_MODES:
        raise ArmlmError(f"compile mode {mode!r}; choose one of {COMPILE_MODES}")
    options = {} if mode == "default" else {"mode": mode}

    def loss(batch: Batch) -> LossOutput:
        return objective.loss(batch, model, None)

    # dynamic=False: every shape is a constant of its graph (a training step's batches all have one shape), never
    # a symbol that a recompile for a second objective or batch shape would otherwise introduce
    return torch.compile(loss, fullgraph=True, dynamic=False, backend=backend, **options)


def datasheet_peak(device: torch.device) -> float | None:
    """The device's dense bf16 FLOP/s from DATASHEET_BF16_PEAKS; None for a CPU or a GPU the table lacks."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in DATASHEET_BF16_PEAKS if key in name), None)
