"""armlm's objectives (every configs/objective config) side by side, and its AR and MLM steps against Hugging Face
transformers' GPT2LMHeadModel and BertForMaskedLM.

    python bench/throughput.py                      # d=256, 4 layers, 4 heads, ff 1024, V=8192, 32 x 128, fp32, CPU
    python bench/throughput.py --rounds 7 --precision bf16 --compile
    python bench/throughput.py --device cuda --precision bf16 --d-model 768 --n-layers 12 --n-heads 12 \
        --d-ff 3072 --vocab-size 30522 --seq-len 512 --batch-size 16 --only armlm   # GPU MFU of model=base

One process builds every model from one configuration (random init, nothing downloaded) and, after a
warm-up, alternates them step by step, so a noisy neighbour slows every contestant of a round alike. Each
round times `--steps` training steps (forward + backward + AdamW step) and as many inference steps (forward
and loss, no graph) per model. Printed: a table of the median tokens/s over rounds with the min-max spread,
each objective's tokens/s over armlm AR's and the armlm / HF ratio (each taken per round, then the
median), and FLOP/s as a share of a large matmul's peak
measured in the same process (armlm's objectives count their own, as a FLOPs budget does: models.flops; the HF
models by bench/flops.py's formula); then the same as one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from armlm.common.machine import keep_large_allocations_on_the_heap  # noqa: E402
from armlm.models.backbone import ModelConfig, Transformer  # noqa: E402
from armlm.objectives.base import Objective  # noqa: E402
from armlm.objectives.mlm import MaskedLM  # noqa: E402
from armlm.training.compiled import compile_loss, datasheet_peak  # noqa: E402
from armlm.training.optim import FUSED_ADAMW_DEVICES, adamw_with_schedule  # noqa: E402
from bench.flops import Shape, classic_flops_per_token, forward_flops_per_token, matmul_peak  # noqa: E402
from bench.machine import require_device  # noqa: E402
from bench.objective_cases import SPECIAL_IDS, objective_names, vocabulary  # noqa: E402
from bench.timed_steps import Contestant, inference_step, precision_context, summarise, timed, training_step  # noqa: E402

N_SPECIAL = SPECIAL_IDS  # armlm's special tokens take ids 0-5; inputs are drawn from the ordinary ids
OBJECTIVE_CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "objective"
HF_REFERENCE = {"ar": "HF gpt2", "mlm": "HF bert"}  # the Hugging Face model each armlm objective is held against
COMPILED = " compiled"  # the suffix of a Hugging Face model's compiled contestant (--compile)


def build_objective(name: str, d_model: int, n_layers: int) -> Objective:
    """The objective as its config builds it (the config may read the model's shape: MLM+NSP's head its width,
    ELECTRA's generator its width and depth)."""
    path = OBJECTIVE_CONFIGS / f"{name}.yaml"
    if not path.is_file():
        raise SystemExit(f"--objectives: no configs/objective/{name}.yaml; choose from {objective_names()}")
    # Composed as train.py composes it: a curriculum or GPT-BERT's mixture nests other objective configs (defaults).
    with initialize_config_dir(config_dir=str(OBJECTIVE_CONFIGS.parent), version_base="1.3"):
        cfg = compose("train", overrides=[f"objective={name}", f"model.d_model={d_model}", f"model.n_layers={n_layers}"])
    return instantiate(cfg.objective)


def synthetic_batch(objective: Objective, input_ids: Tensor, seed: int) -> dict[str, Tensor]:
    """Random blocks, plus what segment pairs carry (segment ids, NSP labels) for an objective that reads them."""
    if objective.input_format != "segment_pairs":
        return {"input_ids": input_ids}
    b, t = input_ids.shape
    generator = torch.Generator(device=input_ids.device).manual_seed(seed)
    token_type_ids = (torch.arange(t, device=input_ids.device) >= t // 2).long().expand(b, t)
    labels = torch.randint(0, 2, (b,), generator=generator, device=input_ids.device)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "nsp_labels": labels}


def mean_forward_flops(objective: Objective, model: Transformer, batch: dict[str, Tensor], seed: int,
                       autocast: contextlib.AbstractContextManager, draws: int = 8) -> float:
    """The objective's own count (models.flops, as training budgets it), averaged over corruption draws: an
    MLM's selected positions and masked diffusion's masked ones change from step to step. Under the step's
    autocast, as the count depends on the attention kernel the precision picks."""
    generator = torch.Generator(device=batch["input_ids"].device).manual_seed(seed + 1)
    with torch.no_grad(), autocast:
        return statistics.mean(objective.loss(batch, model, generator).forward_flops for _ in range(draws))


def armlm_contestants(args: argparse.Namespace, shape: Shape, device: torch.device, batch: Tensor) -> list[Contestant]:
    """armlm's model and objectives exactly as training builds them: the objective's loss (corruption included,
    on the device) and the AdamW of training.optim; one per objective config, or those in --objectives."""
    autocast = lambda: precision_context(device, args.precision)  # noqa: E731
    contestants = []
    for name in args.objectives or objective_names():
        objective = build_objective(name, shape.d_model, shape.n_layers)
        torch.manual_seed(args.seed)
        model = Transformer(ModelConfig(
            vocab_size=shape.vocab_size, max_len=max(512, shape.seq_len), d_model=shape.d_model,
            n_layers=shape.n_layers, n_heads=shape.n_heads, d_ff=shape.d_ff, dropout=args.dropout,
        )).to(device)
        objective.set_vocabulary(vocabulary(shape.vocab_size))
        objective.to(device)
        inputs = synthetic_batch(objective, batch, args.seed)
        flops = mean_forward_flops(objective, model, inputs, args.seed, autocast()) / shape.tokens
        parameters = nn.ModuleList([model, objective])  # MLM+NSP's head trains too
        optimizer = adamw_with_schedule(
            parameters, lr=1e-4, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-6, warmup_steps=1, total_steps=10**9,
            min_lr_ratio=1.0,
        )["optimizer"]
        generator = torch.Generator(device=device).manual_seed(args.seed)
        # trainer.step.compile=true's step: the whole loss as one graph, its draws from the global stream
        compiled = (compile_loss(objective, model, mode=args.compile_mode, backend=args.compile_backend)
                    if args.compile else None)

        def loss_of_batch(objective=objective, model=model, generator=generator, inputs=inputs,
                          compiled=compiled) -> Tensor:
            return compiled(inputs).loss if compiled else objective.loss(inputs, model, generator).loss

        contestants.append(Contestant(
            f"armlm {name}", name, training_step(parameters, loss_of_batch, optimizer, autocast),
            inference_step(parameters, loss_of_batch, autocast), flops,
        ))
    return contestants


def hf_contestants(args: argparse.Namespace, shape: Shape, device: torch.device, batch: Tensor) -> list[Contestant]:
    """GPT2LMHeadModel and BertForMaskedLM at the same size, with SDPA attention and fused AdamW (what the
    HF Trainer uses). BERT gets inputs corrupted once by armlm's MLM objective, outside the timed step. With
    --compile each also runs compiled (torch.compile of its forward and loss, as users compile HF models), a
    contestant of its own on the same weights, so armlm's compiled step is held against both."""
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # GPT-2's default bos/eos id (50256) lies outside a small vocabulary

    torch.manual_seed(args.seed)
    gpt2 = GPT2LMHeadModel(GPT2Config(
        vocab_size=shape.vocab_size, n_positions=max(512, shape.seq_len), n_embd=shape.d_model,
        n_layer=shape.n_layers, n_head=shape.n_heads, n_inner=shape.d_ff, resid_pdrop=args.dropout,
        embd_pdrop=args.dropout, attn_pdrop=args.dropout, attn_implementation="sdpa",
    )).to(device)
    bert = BertForMaskedLM(BertConfig(
        vocab_size=shape.vocab_size, hidden_size=shape.d_model, num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads, intermediate_size=shape.d_ff,
        max_position_embeddings=max(512, shape.seq_len),
        hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout, attn_implementation="sdpa",
    )).to(device)
    corruption = MaskedLM()
    corruption.set_vocabulary(vocabulary(shape.vocab_size))
    corrupted, labels = corruption.to(device).corrupt(batch, torch.Generator(device=device).manual_seed(args.seed))
    losses = {
        "gpt2": (gpt2, lambda ids, targets: gpt2(input_ids=ids, labels=targets).loss, (batch, batch), "ar", True),
        "bert": (bert, lambda ids, targets: bert(input_ids=ids, labels=targets).loss, (corrupted, labels), "mlm", False),
    }
    contestants = []
    for name, (model, loss, inputs, objective, causal) in losses.items():
        flops = forward_flops_per_token(shape, causal=causal, vocab_share=1.0, mlm_transform=not causal)
        autocast = lambda: precision_context(device, args.precision)  # noqa: E731
        ways = {"": loss}
        if args.compile:
            ways[COMPILED] = torch.compile(loss, backend=args.compile_backend,
                                           **({} if args.compile_mode == "default" else {"mode": args.compile_mode}))
        for suffix, run_loss in ways.items():
            # The HF Trainer's default optimiser with torch >= 2.8: adamw_torch_fused.
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01,
                                          fused=device.type in FUSED_ADAMW_DEVICES)

            def loss_of_batch(run_loss=run_loss, inputs=inputs) -> Tensor:
                return run_loss(*inputs)

            contestants.append(Contestant(
                f"HF {name}{suffix}", objective, training_step(model, loss_of_batch, optimizer, autocast),
                inference_step(model, loss_of_batch, autocast), flops))
    return contestants


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    shape = Shape(args.d_model, args.n_layers, args.n_heads, args.d_ff, args.vocab_size, args.batch_size, args.seq_len)
    torch.manual_seed(args.seed)
    batch = torch.randint(N_SPECIAL, shape.vocab_size, (shape.batch_size, shape.seq_len), device=device)
    contestants = armlm_contestants(args, shape, device, batch)
    if args.only != "armlm":
        contestants += hf_contestants(args, shape, device, batch)
    peak_dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    peaks = []
    seconds: dict[tuple[str, str], list[float]] = {(c.name, m): [] for c in contestants for m in ("train", "infer")}
    for c in contestants:  # warm-up: allocator, thread pool, autotuning, compilation
        timed(c.train, args.warmup, device)
        timed(c.infer, args.warmup, device)
    for _ in range(args.rounds):
        peaks.append(matmul_peak(device, peak_dtype, size=args.peak_size))
        for mode in ("train", "infer"):
            # Step by step in turn (A B C D A B C D ...), so a slow second hits every model alike.
            spent = {c.name: 0.0 for c in contestants}
            for _ in range(args.steps):
                for c in contestants:
                    spent[c.name] += timed(getattr(c, mode), 1, device)
            for c in contestants:
                seconds[(c.name, mode)].append(spent[c.name] / args.steps)
    peak = statistics.median(peaks)
    sheet = datasheet_peak(device) if args.precision == "bf16" else None  # the data sheet's dense bf16 figure
    rows = []
    for c in contestants:
        reference = HF_REFERENCE.get(c.objective)
        for mode in ("train", "infer"):
            per_round = seconds[(c.name, mode)]
            tokens_per_s = [shape.tokens / s for s in per_round]
            flops = c.forward_flops_per_token * (3 if mode == "train" else 1)
            achieved = statistics.median(tokens_per_s) * flops
            row = {
                "model": c.name, "mode": mode, "tokens_per_s": summarise(tokens_per_s), "flops_per_s": achieved,
                "peak_share": achieved / peak,
            }
            if sheet:
                row["datasheet_share"] = achieved / sheet
            if mode == "train":
                row["classic_peak_share"] = statistics.median(tokens_per_s) * classic_flops_per_token(shape) / peak
            for key, hf in (("ratio_vs_hf", reference), ("ratio_vs_hf_compiled", f"{reference}{COMPILED}")):
                if c.name.startswith("armlm") and (hf, mode) in seconds:
                    row[key] = summarise([ref / mine for mine, ref in zip(per_round, seconds[(hf, mode)])])
            if c.name.startswith("armlm") and ("armlm ar", mode) in seconds and c.name != "armlm ar":
                # tokens/s of this objective over armlm AR's, round by round: what the objective itself costs
                row["ratio_vs_ar"] = summarise([ar / mine for mine, ar in zip(per_round, seconds[("armlm ar", mode)])])
            rows.append(row)
    return {
        "config": {**asdict(shape), "dropout": args.dropout, "precision": args.precision, "device": args.device,
                   "compile": args.compile, "compile_mode": args.compile_mode, "allocator": args.allocator,
                   "threads": torch.get_num_threads(),
                   "rounds": args.rounds, "steps": args.steps, "torch": torch.__version__},
        "matmul_peak_flops": summarise(peaks), "rows": rows,
    }


def print_table(result: dict) -> None:
    cfg, peak = result["config"], result["matmul_peak_flops"]
    print(f"# d={cfg['d_model']} L={cfg['n_layers']} H={cfg['n_heads']} ff={cfg['d_ff']} V={cfg['vocab_size']} "
          f"batch {cfg['batch_size']}x{cfg['seq_len']} {cfg['precision']} {cfg['device']} dropout={cfg['dropout']} "
          f"compile={cfg['compile']} allocator={cfg['allocator']} threads={cfg['threads']}; "
          f"median of {cfg['rounds']} rounds x {cfg['steps']} steps")
    print(f"# matmul peak {peak['median'] / 1e9:.1f} GFLOP/s (rounds {peak['min'] / 1e9:.1f}-{peak['max'] / 1e9:.1f})")
    print("| model | step | tokens/s (min-max) | / armlm ar (min-max) | armlm / HF eager (min-max) "
          "| armlm / HF compiled (min-max) | share of peak | 6NT share | share of the data sheet |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in result["rows"]:
        t = row["tokens_per_s"]
        classic = f"{row['classic_peak_share']:.0%}" if "classic_peak_share" in row else ""
        print(f"| {row['model']} | {row['mode']} | {t['median']:,.0f} ({t['min']:,.0f}-{t['max']:,.0f}) "
              f"| {ratio_text(row.get('ratio_vs_ar'))} | {ratio_text(row.get('ratio_vs_hf'))} "
              f"| {ratio_text(row.get('ratio_vs_hf_compiled'))} "
              f"| {row['peak_share']:.0%} | {classic} | {format(row['datasheet_share'], '.1%') if 'datasheet_share' in row else ''} |")


def ratio_text(ratio: dict[str, float] | None) -> str:
    return f"{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})" if ratio else ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("d-model", 256), ("n-layers", 4), ("n-heads", 4), ("d-ff", 1024), ("vocab-size", 8192),
                          ("batch-size", 32), ("seq-len", 128), ("warmup", 3), ("rounds", 5), ("steps", 5),
                          ("seed", 0), ("peak-size", 2048)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--dropout", type=float, default=0.0, help="every model's dropout (armlm's model=small: 0)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16 = autocast, as training does")
    p.add_argument("--device", default="cpu")
    p.add_argument("--compile", action="store_true",
                   help="armlm's training step as one compiled graph (trainer.step.compile=true)")
    p.add_argument("--compile-mode", default="default", help="torch.compile's mode (reduce-overhead: CUDA graphs)")
    p.add_argument("--compile-backend", default="inductor", help="aot_eager: trace without generating kernels")
    p.add_argument("--allocator", choices=("train", "default"), default="train",
                   help="train: glibc keeps large blocks on the heap, as train.py sets it (for every model here); "
                        "default: glibc's own settings")
    p.add_argument("--only", choices=("all", "armlm"), default="all", help="armlm: skip the HF models")
    p.add_argument("--objectives", nargs="+", metavar="NAME",
                   help="armlm objectives to time (configs/objective names); default: every one")
    p.add_argument("--json", type=Path, help="also append the JSON line to this file")
    args = p.parse_args(argv)
    if min(args.rounds, args.steps, args.batch_size, args.seq_len) < 1 or args.warmup < 0:
        p.error("--rounds, --steps, --batch-size and --seq-len must be >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    require_device(args.device, "give --device cpu")
    if args.allocator == "train":
        keep_large_allocations_on_the_heap()
    result = run(args)
    print_table(result)
    line = json.dumps(result)
    print(line)
    if args.json:
        with args.json.open("a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
