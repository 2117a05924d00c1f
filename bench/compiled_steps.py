"""Every objective's training step compiled as one graph (training.compiled), proved on the CPU: whether
`fullgraph=True` traces it, how many graphs and recompiles it takes over several steps (other mask draws, another
learning rate, a moved schedule), eager's and the compiled step's loss on the same draws, and the FLOPs each runs
(a compiled step keeps every row: models.rows).

    python bench/compiled_steps.py                    # every configs/objective config, model=tiny, aot_eager
    python bench/compiled_steps.py --backend inductor # the real compiler (minutes on 2 cores)
    python bench/compiled_steps.py --eager-only --root <an older checkout>   # that code's eager losses, to compare

`--eager-only` needs nothing of today's code but bench/objective_cases.py (copied into the older checkout), so the
losses of the code before the change and after it are printed on the same batch and seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout to import")
    p.add_argument("--backend", default="aot_eager", choices=("aot_eager", "inductor"))
    p.add_argument("--steps", type=int, default=4, help="steps after the first, each under fail_on_recompile")
    p.add_argument("--eager-only", action="store_true", help="print each objective's eager loss only")
    p.add_argument("--objectives", nargs="+", metavar="NAME", help="default: every objective config")
    p.add_argument("--model", default="tiny", help="a configs/model name")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="train.py settings for every case")
    for name, default in (("vocab", 300), ("block", 32), ("batch", 4)):
        p.add_argument(f"--{name}", type=int, default=default)
    return p.parse_args(argv)


def eager_losses(names: list[str]) -> dict[str, float]:
    """Each objective's eager loss on objective_case's batch, its corruption drawn by a generator seeded 0."""
    import torch

    from bench.objective_cases import objective_case

    losses = {}
    for name in names:
        case = objective_case(name)
        torch.manual_seed(0)
        losses[name] = float(case.objective.loss(case.batch, case.model, torch.Generator().manual_seed(0)).loss)
    return losses


def compiled_row(name: str, args: argparse.Namespace) -> dict:
    import torch

    from armlm.objectives.base import TrainingProgress
    from armlm.training.compiled import compile_loss
    from bench.objective_cases import objective_case

    case = objective_case(name, model=args.model, vocab=args.vocab, block=args.block, batch=args.batch,
                          overrides=tuple(args.set))
    backend, steps = args.backend, args.steps
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = compile_loss(case.objective, case.model, backend=backend)
    progress = (lambda k: TrainingProgress(100 * (k + 1), 10_000)) if case.objective.needs_progress else (lambda k: None)
    case.objective.set_progress(progress(0))
    torch.manual_seed(0)
    eager = case.objective.loss(case.batch, case.model, None)
    started = time.perf_counter()
    torch.manual_seed(0)
    out = compiled(case.batch)
    out.loss.backward()
    first_seconds = time.perf_counter() - started
    recompiled = False
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            for k in range(1, steps + 1):
                case.objective.set_progress(progress(k))
                torch.manual_seed(k)
                compiled(case.batch).loss.backward()
    except Exception:  # noqa: BLE001 (what recompiled is the row's result)
        recompiled = True
    counters = torch._dynamo.utils.counters
    return {"objective": name, "graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": sum(counters["graph_break"].values()), "recompiled": recompiled,
            "eager_loss": float(eager.loss), "compiled_loss": float(out.loss.detach()),
            "eager_gflops": eager.forward_flops / 1e9, "compiled_gflops": out.forward_flops / 1e9,
            "first_step_s": round(first_seconds, 2)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(args.root))
    from bench.objective_cases import objective_names

    names = args.objectives or objective_names()
    if args.eager_only:
        print(json.dumps({"root": str(args.root), "eager_losses": eager_losses(names)}))
        return
    rows = [compiled_row(name, args) for name in names]
    print(f"backend={args.backend}, model={args.model}, V={args.vocab}, {args.batch} x {args.block}, fp32, CPU; "
          f"{args.steps} steps after the first under fail_on_recompile")
    print("| objective | graphs | breaks | recompiled | eager loss | compiled loss | eager GFLOPs | compiled GFLOPs |"
          " first step s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['objective']} | {r['graphs']} | {r['graph_breaks']} | {r['recompiled']} | {r['eager_loss']:.6f} | "
              f"{r['compiled_loss']:.6f} | {r['eager_gflops']:.4f} | {r['compiled_gflops']:.4f} | {r['first_step_s']} |")
    print(json.dumps({"backend": args.backend, "model": args.model, "vocab": args.vocab, "block": args.block,
                      "batch": args.batch, "rows": rows}))


if __name__ == "__main__":
    main()
