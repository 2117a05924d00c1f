"""Does a pretraining step learn, and if not, which setting stops it: one objective and shape under each variant of
the step's settings, a few hundred steps each, side by side (issue 82: `trainer=gpu` learned nothing on an H200).

    python bench/gpu_learns.py                          # on a GPU: MLM, model=small, 300 steps a variant
    python bench/gpu_learns.py --objective ar --steps 500 --json learns.jsonl
    python bench/gpu_learns.py --dry-run                # on the CPU: every variant at tiny size, 3 steps

Each variant is a list of train.py overrides on top of the step as `trainer=gpu` ran it on 4 December ("as of 4 Dec":
compiled, torch's choice of SDPA kernels, fused AdamW, clipping at 1.0, 64-token blocks), and runs in a process of its
own (a compiled graph keeps the SDPA kernel it was traced with), several at once. The step is the run's own: the
config composed as train.py composes it, PretrainModule's loss (compiled or eager) under the trainer's autocast,
training.optim's AdamW and schedule, the norm measured before clipping and clipped with it, attention restricted by
training.step_config.attention_kernels, but in a bare loop that keeps stepping through NaN/inf (train.py stops there) and
counts it. Printed per variant: the training loss's drop (first ten steps' mean to last ten's), the held-out loss
against the unigram baseline, the pre-clip gradient norm (median, largest), the steps whose norm was NaN/inf (the
first one and the parameters most often non-finite). A variant learns when its held-out loss ends below the unigram
baseline with every norm finite. The culprit: a single change that makes the failing step learn.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
from dataclasses import asdict
from itertools import cycle, islice
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch  # noqa: E402

from armlm.common.config import compose_config  # noqa: E402
from armlm.common.seeding import TRAIN_CORRUPTION, VAL_CORRUPTION, derived_seed  # noqa: E402
from armlm.training.lit_module import PretrainModule  # noqa: E402
from armlm.training.optim import adamw_with_schedule  # noqa: E402
from armlm.training.preflight import check_config  # noqa: E402
from armlm.training.setup import build  # noqa: E402
from armlm.training.step_config import attention_kernels, step_settings, use_matmul_precision  # noqa: E402
from bench.machine import require_device  # noqa: E402

ISSUE_82_STEP = ["trainer=gpu", "trainer.step.sdpa_backends=null"]
NO_CUDNN = "trainer.step.sdpa_backends=[flash,efficient,math]"
# name -> the overrides on top of ISSUE_82_STEP; "{long}" is the long block size (--blocks' second)
VARIANTS: dict[str, list[str]] = {
    "as of 4 Dec": [],
    "eager": ["trainer.step.compile=false"],
    "cuDNN attention off": [NO_CUDNN],
    "plain AdamW": ["trainer.step.fused_adamw=false"],
    "no clipping": ["trainer.gradient_clip_val=null"],
    "long blocks": ["data.block_size={long}"],
    "math attention only": ["trainer.step.sdpa_backends=[math]"],
    "eager, cuDNN off": ["trainer.step.compile=false", NO_CUDNN],
    "long blocks, cuDNN off": ["data.block_size={long}", NO_CUDNN],
    "fp32": ["trainer.precision=32-true"],
}
# The variants whose change a run can adopt and still be the run the tables name, preferred in this order
FIXES = ("cuDNN attention off", "plain AdamW", "math attention only", "fp32")
# The dry run's CPU stand-ins for what only a GPU has
DRY_RUN = ["trainer.accelerator=cpu", "trainer.step.compile_backend=aot_eager", "trainer.step.loader_workers=0",
           "trainer.step.pin_memory=false", "model=tiny", "data.batch_size=4"]
WINDOW = 10  # steps averaged at each end of the loss curve


def compose(objective: str, block: int, extra: list[str], variant: list[str]) -> Any:
    return compose_config("train", [*ISSUE_82_STEP, f"objective={objective}", "model=small",
                                    f"data.block_size={block}", *extra, *variant])


def device_of(cfg: Any) -> torch.device:
    return torch.device("cuda" if cfg.trainer.accelerator in ("gpu", "cuda") else "cpu")


def autocast(cfg: Any, device: torch.device) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=str(cfg.trainer.precision).startswith("bf16"))


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def run_variant(cfg: Any, steps: int, val_batches: int) -> dict[str, Any]:
    """`steps` training steps of the composed config's run in a bare loop, and its held-out loss after them."""
    objective, model_config = check_config(cfg)
    step = step_settings(cfg.trainer)
    use_matmul_precision(cfg.trainer)
    device = device_of(cfg)
    datamodule = build(cfg.data, input_format=objective.input_format, seed=cfg.seed)
    datamodule.setup("fit")
    model_config.vocab_size = datamodule.vocabulary.size
    torch.manual_seed(cfg.seed)
    module = PretrainModule(model=asdict(model_config), objective={}, optim={}, seed=cfg.seed,
                            compile_step={"mode": step["compile_mode"], "backend": step["compile_backend"]}
                            if step["compile"] else None, built_objective=objective)
    module.objective.set_vocabulary(datamodule.vocabulary)
    module.to(device).train()
    optim = cfg.optim
    settings = adamw_with_schedule(module, lr=optim.lr, weight_decay=optim.weight_decay, betas=tuple(optim.betas),
                                   eps=optim.eps, warmup_steps=optim.warmup_steps, total_steps=steps,
                                   min_lr_ratio=optim.min_lr_ratio, fused=step["fused_adamw"])
    optimizer, schedule = settings["optimizer"], settings["lr_scheduler"]["scheduler"]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    names = {id(p): name for name, p in module.named_parameters()}
    clip = cfg.trainer.gradient_clip_val
    losses, norms = [], []
    nonfinite_by_param = torch.zeros(len(params), device=device)
    with attention_kernels(cfg.trainer):
        for index, batch in enumerate(islice(cycle(datamodule.train_dataloader()), steps)):
            batch = to_device(batch, device)
            seed = derived_seed(cfg.seed, TRAIN_CORRUPTION, 0, index, 0)
            with autocast(cfg, device):
                if module.compiled_loss is not None:
                    torch.manual_seed(seed)
                    loss = module.compiled_loss(batch).loss
                else:
                    generator = torch.Generator(device=device).manual_seed(seed)
                    loss = module.objective.loss(batch, module.model, generator).loss
            loss.backward()
            grads = [p.grad if p.grad is not None else torch.zeros((), device=device) for p in params]
            per_param = torch.stack(torch._foreach_norm(grads))
            norm = torch.linalg.vector_norm(per_param)
            nonfinite_by_param += ~torch.isfinite(per_param)
            if clip:
                torch.nn.utils.clip_grads_with_norm_(params, clip, norm)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach().float())
            norms.append(norm.detach().float())
        val = held_out_loss(module, datamodule, cfg, device, val_batches)
    losses_read, norms_read = torch.stack(losses).tolist(), torch.stack(norms)
    finite = torch.isfinite(norms_read)
    bad_steps = (~finite).nonzero().flatten().tolist()
    counts = nonfinite_by_param.tolist()
    worst = sorted((c, names[id(p)]) for c, p in zip(counts, params) if c)[::-1][:3]
    head, tail = losses_read[:WINDOW], losses_read[-WINDOW:]
    return {
        "steps": steps, "loss_start": sum(head) / len(head), "loss_end": sum(tail) / len(tail),
        "val_loss": val, "unigram_baseline": datamodule.unigram_baseline,
        "grad_norm_median": float(norms_read[finite].median()) if bool(finite.any()) else None,
        "grad_norm_max": float(norms_read[finite].max()) if bool(finite.any()) else None,
        "nonfinite_steps": len(bad_steps), "first_nonfinite_step": bad_steps[0] if bad_steps else None,
        "nonfinite_params": [f"{name} ({int(c)})" for c, name in worst],
        "sdpa_backends": step["sdpa_backends"], "device": torch.cuda.get_device_name() if device.type == "cuda"
        else "cpu", "torch": torch.__version__,
    }


@torch.no_grad()
def held_out_loss(module: PretrainModule, datamodule: Any, cfg: Any, device: torch.device, batches: int) -> float:
    """val/loss as the run logs it: the LM NLL per predicted token, over the first `batches` validation batches."""
    module.eval()
    total, count = 0.0, 0
    for index, batch in enumerate(islice(datamodule.val_dataloader(), batches)):
        generator = torch.Generator(device=device).manual_seed(derived_seed(cfg.seed, VAL_CORRUPTION, index, 0))
        with autocast(cfg, device):
            out = module.objective.loss(to_device(batch, device), module.model, generator)
        total += float(out.lm_nll_sum)
        count += int(out.predicted_tokens)
    module.train()
    return total / max(count, 1)


def learns(row: dict[str, Any]) -> bool:
    return row.get("nonfinite_steps") == 0 and row.get("val_loss", float("inf")) < row.get("unigram_baseline", 0)


def verdict(rows: dict[str, dict[str, Any]]) -> str:
    """Which single change from the failing step makes it learn (VARIANTS' one-change rows)."""
    failing = rows.get("as of 4 Dec", {})
    if "error" in failing:
        return f"the step as of 4 Dec did not run: {failing['error']}"
    if learns(failing):
        return "not reproduced: the step as of 4 Dec learns here"
    single = [name for name, changes in VARIANTS.items() if len(changes) == 1 and name in rows and learns(rows[name])]
    if not single:
        return "no single change makes the step as of 4 Dec learn: see the rows"
    return f"culprit: the step as of 4 Dec learns with only {', or only '.join(single)}"


def fix(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The overrides of a variant that learns where the step as of 4 Dec does not, among FIXES (a kernel, the
    optimiser, the precision: what the objectives' table can run with and still be compiled and eager at both block
    sizes), in their order; none where that step learns or no fix does."""
    if learns(rows.get("as of 4 Dec", {})):
        return []
    return next((rows[name]["overrides"] for name in FIXES if name in rows and learns(rows[name])), [])


def table(rows: dict[str, dict[str, Any]]) -> str:
    def number(value: Any, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = ["| variant | loss start -> end | held-out loss | unigram | pre-clip norm median, max | NaN/inf steps "
             "(first) | learns |", "|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | failed: {row['error']} | | | | | no |")
            continue
        first = "" if row["first_nonfinite_step"] is None else f" (step {row['first_nonfinite_step']})"
        lines.append(f"| {name} | {number(row['loss_start'])} -> {number(row['loss_end'])} | {number(row['val_loss'])} "
                     f"| {number(row['unigram_baseline'])} | {number(row['grad_norm_median'], 2)}, "
                     f"{number(row['grad_norm_max'], 2)} | {row['nonfinite_steps']}{first} | "
                     f"{'yes' if learns(row) else 'NO'} |")
    return "\n".join(lines)


def one(args: argparse.Namespace) -> None:
    """The child: one variant, its row as the last line of JSON."""
    cfg = compose(args.objective, args.blocks[0], args.extra, json.loads(args.one))
    try:
        row = run_variant(cfg, args.steps, args.val_batches)
    except Exception as err:  # a variant that cannot run is a row of the table, not the end of the bench
        row = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}
    print(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objective", default="mlm")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--val-batches", type=int, default=20)
    parser.add_argument("--blocks", type=int, nargs=2, default=[64, 512], help="the short and the long block size")
    parser.add_argument("--parallel", type=int, default=10, help="variants run at once, each in its own process")
    parser.add_argument("--dry-run", action="store_true", help="every variant on the CPU at tiny size, 3 steps")
    parser.add_argument("--json", type=Path, help="append each variant's row here")
    parser.add_argument("--markdown", type=Path, help="write the table and the verdict here")
    parser.add_argument("--fix", type=Path, help="write the overrides of the fewest changes that learn here (nothing "
                                                 "where the step as of 4 Dec learns or none does)")
    parser.add_argument("--extra", nargs="*", default=[], help="more train.py overrides for every variant")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), metavar="NAME",
                        help=f"only these variants (default: every one): {', '.join(VARIANTS)}")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's variant (JSON list of overrides)
    args = parser.parse_args()
    if args.dry_run:
        args.steps, args.val_batches, args.blocks, args.parallel = 3, 2, [32, 64], 2
        args.extra = [*DRY_RUN, *args.extra]
    if args.one is not None:
        return one(args)
    if not args.dry_run:  # the variants are CUDA's; without one each would fail alone
        require_device("cuda", "give --dry-run (every variant on the CPU at tiny size)", given="the variants' cuda")
    # The token caches are written once here, before the variants read them at once
    for block in sorted(set(args.blocks)):
        cfg = compose(args.objective, block, args.extra, [])
        build(cfg.data, input_format=check_config(cfg)[0].input_format, seed=cfg.seed).setup("fit")
    variants = {name: [o.format(long=args.blocks[1]) for o in overrides] for name, overrides in VARIANTS.items()
                if args.variants is None or name in args.variants}

    def child(overrides: list[str]) -> dict[str, Any]:
        argv = [sys.executable, __file__, "--one", json.dumps(overrides), "--objective", args.objective, "--steps",
                str(args.steps), "--val-batches", str(args.val_batches), "--blocks", *map(str, args.blocks),
                "--extra", *args.extra]
        done = subprocess.run(argv, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            return {"error": f"exit status {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:200]}"}
        return json.loads(lines[-1])

    def variant(name: str) -> dict[str, Any]:
        row = {"variant": name, "overrides": variants[name], **child(variants[name])}
        print(table({name: row}).splitlines()[-1], flush=True)  # as it ends: a run cut short keeps what ended
        return row

    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        rows = dict(zip(variants, pool.map(variant, variants)))
    print(f"{args.objective}, model=small, blocks of {args.blocks[0]} ({args.blocks[1]} where named), {args.steps} "
          f"steps a variant; on top of: {' '.join(ISSUE_82_STEP)}")
    print(table(rows))
    for name, row in rows.items():
        if row.get("nonfinite_params"):
            print(f"{name}: parameters most often NaN/inf: {', '.join(row['nonfinite_params'])}")
    print(verdict(rows))
    if args.markdown:
        args.markdown.write_text(f"{table(rows)}\n\n{verdict(rows)}\n")
    if args.fix:
        args.fix.write_text(" ".join(fix(rows)))
    if args.json:
        with args.json.open("a") as file:
            for row in rows.values():
                file.write(json.dumps({"objective": args.objective, **row}) + "\n")


if __name__ == "__main__":
    main()
