#!/usr/bin/env bash
# One call on a lent GPU, at most 10 minutes (WALL seconds, default 560), its parts in priority order, each cut at what
# is left of WALL (a part that runs out is cut and the next starts):
#   1. learns:     bench/gpu_learns.py: does the step learn, and which setting stops it (issue 82's variants)
#   2. objectives: bench/objectives_learn.py: every objective config through train.py trainer=gpu, compiled and
#                  eager, 64- and 512-token blocks, each >= 0.5 nats below its unigram baseline; then CoNLL-2003
#                  fine-tuned on CUDA from the MLM run. Runs with the fix part 1 names (learns_fix.txt)
#   3. cuda-tests: the suite's CUDA-only tests (learning, no host sync, SDPA kernels, the CPU tests' checks on CUDA)
#   4. throughput: bench/throughput.py at base shape, compiled, beside HF's models eager and compiled (issue 83)
#   5. profile:    bench/step_profile.py at base shape, compiled: each kernel once, beside the measured step
#   6. train:      a real train.py run at base shape (trainer=gpu): MFU over its whole fit, and its start-up
#   7. launch:     bench/launch_bound.py at the study's shape: CUDA graphs in one process against several processes
#                  sharing the GPU, the measurement that chooses how small models run (issue 83)
#   8. study:      the findings study's AR and MLM arms, 8 seeds each, fine-tuned on CoNLL-2003 (scale=gpu_lease),
#                  every arm x seed a concurrent launch (the joblib launcher)
# Everything comes back as $OUT/lease.tar.gz (logs, summaries, tables; no checkpoints) plus parts.txt and the tables.
#
# Prepared here, before the lease: `bash bench/gpu_lease_prepare.sh` builds the carry (~20 MB, git-ignored: the wheels
# and gensim the image lacks, CoNLL-2003) and checks that the checkout plus the carry fit the tool's 64 MiB; where
# they do not, it prints the line that sets aside records/, docs/ and notebooks/, which no part reads.
# armlm itself is not installed: bench/checkout_site.py links the checkout that travelled into a site folder as
# `armlm`, so the lease runs exactly that code (the dry run imports through the same links).
# On the device: the run tool with carry [".gpu-carry", ".gpu-data.tar.xz"] and
#   bash bench/gpu_lease.sh
# Here, on the CPU, every part at smoke size (tests/test_gpu_lease.py runs it):
#   bash bench/gpu_lease.sh --dry-run
set -uo pipefail
dry=0; [ "${1:-}" = "--dry-run" ] && dry=1
out=${OUT:-/tmp/gpu-lease}
# a call's parts write run folders that train.py keeps (a fresh run never writes over another) and append to parts.txt
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ]; then echo "OUT=$out is not empty: give an empty or new folder"; exit 1; fi
mkdir -p "$out/runs"
here=$(pwd); python=${PYTHON:-python3}
started=$(date +%s); wall=${WALL:-560}
left() { echo $(( wall - ($(date +%s) - started) )); }
# part NAME SECONDS COMMAND...: run COMMAND under min(SECONDS, what is left), its output in $out/runs/NAME.log
part() {
  local name=$1 limit=$2; shift 2
  local budget; budget=$(left); [ "$budget" -gt "$limit" ] && budget=$limit
  if [ "$budget" -le 5 ]; then echo "$name: skipped, no time left" | tee -a "$out/parts.txt"; return; fi
  local t0; t0=$(date +%s)
  timeout "$budget" "$@" > "$out/runs/$name.log" 2>&1; local rc=$?
  echo "$name: rc=$rc, $(( $(date +%s) - t0 )) s" | tee -a "$out/parts.txt"
  grep -v "^{" "$out/runs/$name.log" | tail -n 4
}

if [ "$dry" = 1 ]; then
  device=cpu; dry_flag=--dry-run
  learns=(--variants "as of 4 Dec" "cuDNN attention off")  # a variant with SDPA backends set, and one without
  objectives=(--objectives mlm --blocks 32 --parallel 2
              --finetune-extra task.data.max_train_examples=16 task.data.max_eval_examples=16 trainer.max_steps=2)
  tests=(tests/test_cuda_learning.py)  # skips on the CPU, with its reason
  bench=(--device cpu --precision fp32 --objectives ar --only armlm --compile --compile-backend aot_eager --d-model 64 --n-layers 2
         --n-heads 2 --d-ff 256 --vocab-size 600 --seq-len 32 --batch-size 4 --rounds 1 --steps 1 --warmup 1)
  profile=(--device cpu --precision fp32 --objectives ar --steps 1 --d-model 64 --n-layers 2 --n-heads 2 --d-ff 256
           --vocab-size 600 --seq-len 32 --batch-size 4)
  train=(model=tiny trainer.accelerator=cpu trainer.max_steps=3 trainer.val_check_interval=3 trainer.limit_val_batches=2
         max_tokens=null data.block_size=32 data.batch_size=8 trainer.precision=32-true trainer.step.compile_backend=aot_eager
         trainer.step.loader_workers=0 trainer.step.pin_memory=false)
  launch=(--dry-run)
  # the study part in one process (stage launches are the study tests'; the lease launches each arm x seed)
  study=(scale=smoke seed=22 'extra_pretrain=["trainer.max_steps=3"]' 'tasks=[conll2003]' arm=ar hydra.launcher.n_jobs=1 launcher=in_process
         'extra_finetune=["task.data.max_train_examples=16","task.data.max_eval_examples=16"]')
else
  device=cuda; dry_flag=
  learns=()
  objectives=(--parallel 16)
  # test_cuda_learning.py's runs are part 2's compiled 64-token rows again: part 2 stands for it here
  tests=(tests/test_learning.py tests/test_compiled_step.py tests/test_host_reads.py tests/test_sdpa_calls.py -k "cuda")
  bench=(--device cuda --precision bf16 --objectives ar mlm --compile --d-model 768 --n-layers 12 --n-heads 12
         --d-ff 3072 --vocab-size 30522 --seq-len 512 --batch-size 32 --rounds 3 --steps 10)
  profile=(--device cuda --precision bf16 --objectives ar mlm --steps 3 --compile --d-model 768 --n-layers 12
           --n-heads 12 --d-ff 3072 --vocab-size 30522 --seq-len 512 --batch-size 32)
  train=(model=base data.block_size=512 data.batch_size=32 max_tokens=20_000_000 trainer.val_check_interval=100000
         trainer.limit_val_batches=10 trainer.log_every_n_steps=50)
  launch=(--settings default:1 reduce-overhead:1 default:4 default:16 --steps 300 --timeout 35)
  study=(scale=gpu_lease seed=22,23,24,25,26,27,28,29 arm=ar,mlm hydra.launcher.n_jobs=16)
  bash .gpu-carry/install.sh || exit 1
  export PYTHONPATH=/tmp/site:$here/.gpu-carry/site
  # seqeval.metrics imports one name from scikit-learn, the warning class sklearn.exceptions.UndefinedMetricWarning.
  # The image may lack scikit-learn, and its wheel (~13 MB) would not fit beside the checkout. Where it does not
  # import at all (absent, or installed but broken), that one class is given in a folder of its own, on PYTHONPATH
  if ! $python -c "import sklearn.exceptions" 2> /dev/null; then
    mkdir -p /tmp/sklearn-shim/sklearn && : > /tmp/sklearn-shim/sklearn/__init__.py
    printf 'class UndefinedMetricWarning(UserWarning):\n    """seqeval.metrics imports this alone (bench/gpu_lease.sh)"""\n' \
      > /tmp/sklearn-shim/sklearn/exceptions.py
    export PYTHONPATH=$PYTHONPATH:/tmp/sklearn-shim
    sklearn_note="sklearn: not in the image; seqeval's one import from it given by /tmp/sklearn-shim"
  fi
  mkdir -p /tmp/data && tar -C /tmp/data -xJf .gpu-data.tar.xz && export ARMLM_DATA_DIR=/tmp/data
fi
export PYTHONUNBUFFERED=1
# armlm is the checkout's, through links in a site folder of its own, first on the path (ahead of any installed copy)
links=$(mktemp -d); trap 'rm -rf "$links"' EXIT
$python bench/checkout_site.py "$links" || exit 1
export PYTHONPATH=$links${PYTHONPATH:+:$PYTHONPATH}
# The device, the versions, and what the parts import and the image lacks, in one process (each start imports torch
# and lightning, seconds of the lease): a module that does not import here would fail every part, so stop in one
# line (imported, not only found: a package present without its dependency, or built for another numpy, fails)
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
  $python - <<'PY' || echo "not importable: (the import check itself failed)"
import importlib
import os
import sys


def imports(name):
    try:
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 - any failure to import is what this check reports
        return False


missing = [name for name in ("torch", "lightning", "hydra", "omegaconf", "seqeval.metrics", "gensim.corpora.wikicorpus",
                             "smart_open", "joblib", "hydra_plugins.hydra_joblib_launcher", "armlm.commands",
                             "armlm.training.run", "armlm.finetune.run", "armlm.studies.runner") if not imports(name)]
torch, lightning = sys.modules.get("torch"), sys.modules.get("lightning")
print("torch", getattr(torch, "__version__", None), "lightning", getattr(lightning, "__version__", None),
      "cudnn", torch.backends.cudnn.version() if torch else None)
if imports("armlm"):
    armlm = sys.modules["armlm"]
    print("armlm", armlm.__file__, "->", os.path.realpath(armlm.__file__))
if missing:
    print("not importable:", " ".join(missing))
PY
  [ -n "${sklearn_note:-}" ] && echo "$sklearn_note"; } | tee "$out/device.txt"
missing=$(sed -n 's/^not importable: //p' "$out/device.txt")
if [ -n "$missing" ]; then
  echo "setup: $missing not importable; bash bench/gpu_lease_prepare.sh carries them" | tee -a "$out/parts.txt"; exit 1
fi

# 1. does the step learn, and what stops it; the fix it names is what part 2 runs with
part learns 170 $python bench/gpu_learns.py $dry_flag "${learns[@]}" --json "$out/learns.jsonl" --fix "$out/learns_fix.txt" \
  --markdown "$out/learns.md"
[ -s "$out/learns.md" ] || grep "^| " "$out/runs/learns.log" > "$out/learns.md"  # cut short: the rows that ended
fix=(); [ -s "$out/learns_fix.txt" ] && read -r -a fix < "$out/learns_fix.txt"

# 2. every objective learns through train.py trainer=gpu, and a fine-tuning run on CUDA from one of them
part objectives 270 $python bench/objectives_learn.py $dry_flag "${objectives[@]}" --finetune conll2003 \
  --out "$out/objectives" --json "$out/objectives.jsonl" ${fix[@]:+--extra "${fix[@]}"}
grep -E "^(\||fine-tuned|did not)" "$out/runs/objectives.log" > "$out/objectives.md"

# 3. the suite's CUDA-only tests
part cuda-tests 150 $python -m pytest -q -p no:cacheprovider -o addopts= "${tests[@]}"  # addopts: xdist's --dist

# 4. speed, compiled, beside HF's models in the same process
part throughput 90 $python bench/throughput.py "${bench[@]}" --json "$out/throughput.jsonl"

# 5. where the compiled step's time goes, each kernel once
part profile 60 $python bench/step_profile.py "${profile[@]}"

# 6. a real run's MFU over its whole fit (summary.json's mfu, fit and start-up seconds)
part train 120 $python train.py objective=mlm trainer=gpu trainer.enable_progress_bar=false "${train[@]}" \
  "hydra.run.dir=$out/train"

# 7. small models: CUDA graphs against processes sharing the GPU, at the study's shape
part launch 150 $python bench/launch_bound.py "${launch[@]}" --json "$out/launch.jsonl"

# 8. the findings' AR and MLM arms at 10 x the CPU budget, every arm x seed launched at once, while time is left
part study 300 $python -m armlm study -m hydra/launcher=joblib study=findings "${study[@]}" 'stages=[pretrain,finetune]' \
  "root=$out/study" report=false
echo "done in $(( $(date +%s) - started )) s" | tee -a "$out/parts.txt"
# one archive of everything (no checkpoints or event files); beside it only the tables, at most 8 files in all
tar -C "$out" --exclude='*.ckpt' --exclude='events.out.*' -czf /tmp/lease.tar.gz . && mv /tmp/lease.tar.gz "$out" \
  && find "$out" -mindepth 1 -maxdepth 1 ! -name lease.tar.gz ! -name parts.txt ! -name device.txt ! -name learns.md \
    ! -name objectives.md -exec rm -rf {} +
ls -la "$out" | tee -a "$out/parts.txt"
