"""What every objective's training step hands `F.scaled_dot_product_attention`, and which CUDA kernels each call
can use: one row per objective and kind of call, on a block batch as the data module gives it, and again with
`data.cross_document_attention=false` (documents kept apart).

    python bench/sdpa_calls.py                     # every config in configs/objective/, model=tiny, fp32 on the CPU

A call is recorded with the attention pattern of the pass that made it (`sdpa_arguments`, spied on in every module
that holds it), so a mask can be traced to what asked for it. The kernels a call can use follow PyTorch's own
selection rules (torch/nn/attention and its sdp_utils): flash needs no mask tensor, a half-precision dtype and a head
size of at most 256 in multiples of 8; memory-efficient attention takes a mask; math takes anything. On a GPU the
bench also asks torch itself (`torch.backends.cuda.can_use_flash_attention`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import armlm.models.attention as attention_module  # noqa: E402
from bench.objective_cases import objective_case, objective_names  # noqa: E402

HALF_DTYPES = (torch.float16, torch.bfloat16)
FLASH_MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class SdpaCall:
    kind: str  # the pass's models.attention kind
    documents: bool  # the pass kept documents apart
    padded: bool  # the pass had padding to mask
    mask: tuple[int, ...] | None  # the mask tensor's shape, None: no mask
    is_causal: bool
    head_dim: int

    def kernels(self, dtype: torch.dtype) -> tuple[str, ...]:
        """The CUDA kernels this call can use in `dtype` (the matmul dtype: bf16 under trainer=gpu)."""
        flash = (self.mask is None and dtype in HALF_DTYPES and self.head_dim <= FLASH_MAX_HEAD_DIM
                 and self.head_dim % 8 == 0)
        return (("flash",) if flash else ()) + ("efficient", "math")


@contextlib.contextmanager
def recorded_calls() -> Iterator[list[SdpaCall]]:
    """Every SDPA call made inside, each with the attention pattern of the pass it belongs to."""
    calls: list[SdpaCall] = []
    passes: list[tuple[str, bool, bool]] = []
    real_arguments, real_sdpa = attention_module.sdpa_arguments, F.scaled_dot_product_attention

    def arguments(attention, padding, *args, **kwargs):
        passes.append((attention.kind, attention.documents is not None, padding is not None))
        return real_arguments(attention, padding, *args, **kwargs)

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        kind, documents, padded = passes[-1]
        calls.append(SdpaCall(kind, documents, padded, None if attn_mask is None else tuple(attn_mask.shape),
                              bool(is_causal), int(q.shape[-1])))
        return real_sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

    holders = [m for m in list(sys.modules.values()) if getattr(m, "sdpa_arguments", None) is real_arguments]
    for module in holders:
        module.sdpa_arguments = arguments
    F.scaled_dot_product_attention = sdpa
    try:
        yield calls
    finally:
        F.scaled_dot_product_attention = real_sdpa
        for module in holders:
            module.sdpa_arguments = real_arguments


def expected_arguments(call: SdpaCall) -> tuple[bool, bool]:
    """(carries a mask, is_causal) that keeps the fastest kernel eligible for this pass: causal and bidirectional
    passes without padding or documents need no mask tensor; anything else folds into one mask, never beside
    is_causal."""
    static = call.kind in attention_module.STATIC_KINDS and not call.documents and not call.padded
    return (not static, static and call.kind == "causal")


def distinct(calls: list[SdpaCall]) -> list[SdpaCall]:
    return list(dict.fromkeys(calls))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objectives", nargs="*", default=objective_names())
    parser.add_argument("--dtype", default="bfloat16", help="the matmul dtype the kernels are judged for")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    rows = []
    print("| objective | data | pass | mask | is_causal | head dim | CUDA kernels it can use |\n|---|---|---|---|---|---|---|")
    for name in args.objectives:
        for documents in (False, True):
            case = objective_case(name, documents=documents)
            if case is None:
                continue
            with recorded_calls() as calls:
                case.objective.loss(case.batch, case.model, torch.Generator().manual_seed(0))
            for call in distinct(calls):
                data = "documents apart" if documents else "blocks"
                kernels = ", ".join(call.kernels(dtype))
                print(f"| {name} | {data} | {call.kind}{' + padding' if call.padded else ''} | "
                      f"{call.mask or '-'} | {call.is_causal} | {call.head_dim} | {kernels} |")
                rows.append({"objective": name, "data": data, **asdict(call), "kernels": call.kernels(dtype)})
    print(json.dumps({"dtype": args.dtype, "rows": rows}))
    return rows


if __name__ == "__main__":
    main()
