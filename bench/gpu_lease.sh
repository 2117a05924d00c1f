#!/usr/bin/env bash
# Issue 73's one call on a lent GPU, at most 10 minutes (WALL seconds, default 540), everything under $OUT:
#   1. the carried packages installed (.gpu-carry, ../shared/tools/gpu_carry.sh);
#   2. bench/throughput.py at model=small and model=base, AR and MLM beside HF's GPT-2 and BERT in each process,
#      eager and compiled, for the baseline checkout (54b17a1) and HEAD in turn: tokens/s, share of the data sheet
#      and of the matmul peak measured in the same process, ratio to HF;
#   3. bench/step_profile.py's top ten operators of each step (HEAD, model=base, compiled);
#   4. a real train.py run (model=base, trainer=gpu): train/mfu over its whole fit, and its start-up;
#   5. with the time left, scale=gpu_lease: the findings study's AR and MLM arms, 3 seeds, fine-tuned on CoNLL-2003.
# Each part runs under what is left of WALL; a part that runs out is cut and the next starts.
#
# Prepared here, before the lease (each output is git-ignored and carried):
#   bash ../shared/tools/gpu_carry.sh && rm -rf .gpu-carry/site/gensim/test/test_data/enwiki*   # 31 MB
#   git archive 54b17a1 -- . ':!records' ':!docs' ':!tests' ':!notebooks' > .gpu-baseline.tar        # 1.2 MB
#   tar -C "$ARMLM_DATA_DIR" -cJf .gpu-data.tar.xz conll2003                                         # CoNLL-2003
# On the device: the run tool with carry [".gpu-carry", ".gpu-baseline.tar", ".gpu-data.tar.xz"] and
#   bash bench/gpu_lease.sh
# Here, on the CPU, every part at smoke size (tests/test_gpu_lease.py runs it):
#   bash bench/gpu_lease.sh --dry-run
set -uo pipefail
dry=0; [ "${1:-}" = "--dry-run" ] && dry=1
out=${OUT:-/tmp/gpu-lease}; mkdir -p "$out"
here=$(pwd); python=${PYTHON:-python3}
started=$(date +%s); wall=${WALL:-540}
left() { echo $(( wall - ($(date +%s) - started) )); }
# part NAME SECONDS COMMAND...: run COMMAND under min(SECONDS, what is left), its output in $out/NAME.log
part() {
  local name=$1 limit=$2; shift 2
  local budget; budget=$(left); [ "$budget" -gt "$limit" ] && budget=$limit
  if [ "$budget" -le 5 ]; then echo "$name: skipped, no time left" | tee -a "$out/parts.txt"; return; fi
  local t0; t0=$(date +%s)
  timeout "$budget" "$@" > "$out/$name.log" 2>&1; local rc=$?
  echo "$name: rc=$rc, $(( $(date +%s) - t0 )) s" | tee -a "$out/parts.txt"
  grep -v "^{" "$out/$name.log" | tail -n 3
}

if [ "$dry" = 1 ]; then
  device=cpu; precision=fp32; backend=aot_eager
  shapes=("small --d-model 64 --n-layers 2 --n-heads 2 --d-ff 256 --vocab-size 600 --seq-len 32 --batch-size 4")
  bench_steps=(--rounds 1 --steps 1 --warmup 1); compile_flags="--compile --compile-backend aot_eager"
  train=(model=tiny trainer.max_steps=3 trainer.val_check_interval=3 trainer.limit_val_batches=2 max_tokens=null
         data.block_size=32 data.batch_size=8 data.tokenizer.vocab_size=600 trainer.precision=32-true
         trainer.enable_progress_bar=false
         trainer.step.compile=true trainer.step.compile_backend=aot_eager)
  study=(scale=smoke seeds=1 first_seed=22 'extra_pretrain=["trainer.max_steps=3"]' 'tasks=[conll2003]'
         'extra_finetune=["task.data.max_train_examples=16","task.data.max_eval_examples=16"]')
  arms=(ar)  # the arms share every line of the study's code: one shows the part works
else
  device=cuda; precision=bf16; backend=inductor
  shapes=("small --d-model 256 --n-layers 4 --n-heads 4 --d-ff 1024 --vocab-size 8192 --seq-len 128 --batch-size 128"
          "base --d-model 768 --n-layers 12 --n-heads 12 --d-ff 3072 --vocab-size 30522 --seq-len 512 --batch-size 32")
  bench_steps=(--rounds 5 --steps 10); compile_flags="--compile"
  train=(model=base model.positions=rope trainer=gpu data.block_size=512 data.batch_size=32 max_tokens=20_000_000
         trainer.val_check_interval=100000 trainer.limit_val_batches=10 trainer.log_every_n_steps=50)
  study=(scale=gpu_lease seeds=3 first_seed=22); arms=(ar mlm)
  bash .gpu-carry/install.sh || exit 1
  export PYTHONPATH=/tmp/site:$here/.gpu-carry/site
  mkdir -p /tmp/data && tar -C /tmp/data -xJf .gpu-data.tar.xz && export ARMLM_DATA_DIR=/tmp/data
fi
export PYTHONUNBUFFERED=1
baseline=/tmp/gpu-lease-baseline; archive=${BASELINE_TAR:-.gpu-baseline.tar}
if [ -f "$archive" ]; then rm -rf "$baseline" && mkdir -p "$baseline" && tar -C "$baseline" -xf "$archive"
else baseline=  # no archive: HEAD only, said in parts.txt
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
  $python -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"; } \
  | tee "$out/device.txt"

# 2. throughput: baseline and HEAD in turn, per shape, eager then compiled (HF beside armlm in every process)
for shape in "${shapes[@]}"; do
  name=${shape%% *}; flags=${shape#* }
  for compiled in "" "$compile_flags"; do
    tag=$name${compiled:+-compiled}
    for tree in ${baseline:+"$baseline"} "$here"; do
      which=$([ "$tree" = "$here" ] && echo head || echo 54b17a1)
      # the baseline compiles with inductor only (its backbone alone): a CPU dry run leaves it out
      [ "$dry" = 1 ] && [ -n "$compiled" ] && [ "$which" != head ] && continue
      # shellcheck disable=SC2086
      part "throughput-$tag-$which" 150 $python "$tree/bench/throughput.py" --device "$device" --precision "$precision" \
        --objectives ar mlm $compiled $flags "${bench_steps[@]}" --json "$out/throughput.jsonl"
    done
  done
done
[ -z "$baseline" ] && echo "baseline: .gpu-baseline.tar missing, HEAD only" | tee -a "$out/parts.txt"

# 3. where the compiled step's time goes
# shellcheck disable=SC2086
part profile 90 $python bench/step_profile.py --device "$device" --precision "$precision" --steps 3 \
  $compile_flags ${shapes[-1]#* }

# 4. a real run's MFU over its whole fit (train/mfu in its TensorBoard run; summary.json's FLOPs and fit time)
part train 180 $python train.py objective=mlm "${train[@]}" trainer.step.compile_backend=$backend \
  "hydra.run.dir=$out/train"
$python - "$out/train" <<'PY' | tee "$out/train_mfu.txt"
import json, sys
from pathlib import Path
summary = Path(sys.argv[1]) / "summary.json"
if summary.is_file():
    s = json.loads(summary.read_text())
    print({k: s.get(k) for k in ("steps", "tokens_seen", "flops_seen", "fit_seconds", "wall_seconds", "mfu")})
else:
    print("train: no summary.json (cut or failed; see train.log)")
PY

# 5. the findings' AR and MLM arms at 10 x the CPU budget, while time is left
for arm in "${arms[@]}"; do
  part "study-$arm" 600 $python study.py study=findings "${study[@]}" arm=$arm 'stages=[pretrain,finetune]' \
    "root=$out/study" report=false
done
ls "$out" > "$out/files.txt"
echo "done in $(( $(date +%s) - started )) s" | tee -a "$out/parts.txt"
