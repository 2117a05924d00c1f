#!/usr/bin/env bash
# One call on a lent GPU (the device tool; bench/README.md): the document mask's oracle and cost with CUDA's
# attention kernels, then the efficiency study's pilot ladder on gutenwiki-10m (seed 20, no registered seed), every
# run sharing the GPU as its own process under one wall limit. Prepared here:
#   bash ../shared/tools/gpu_carry.sh && rm -rf .gpu-carry/site/gensim*     # hydra, omegaconf, seqeval (gensim unused)
#   mkdir -p .gpu-data && tar -C $ARMLM_DATA_DIR -cf - gutenwiki-10m | xz -6 > .gpu-data/gutenwiki-10m.tar.xz
# On the device (carry .gpu-carry and .gpu-data):
#   WALL=360 bash bench/gpu_efficiency_pilot.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
bash .gpu-carry/install.sh || exit 1
python3 bench/checkout_site.py /tmp/armlm-site || exit 1  # armlm is the checkout that travelled, linked (no wheel)
export PYTHONPATH=/tmp/armlm-site:/tmp/site PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2 ARMLM_DATA_DIR=/tmp/data ARMLM_CACHE_DIR=/tmp/cache
mkdir -p /tmp/data && tar -C /tmp/data -xJf .gpu-data/gutenwiki-10m.tar.xz || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"; } \
  | tee "$out/device.txt"
# One MLM pass over the train split at 8,192 (15.55M tokens, 32 x 64 blocks) costs 2.93e14 training FLOPs.
python3 bench/efficiency_pilot.py --root /tmp/pilot --scale gutenwiki --base-budget 2.93e14 --parallel 8 \
  --wall "${WALL:-360}" --runs electra:2 electra:1 all_tokens_mlm:1 electra_15:1 mlm:1 replace_mlm:1 \
  all_tokens_mlm:2 electra:4 --extra-pretrain trainer=gpu trainer.val_check_interval=1000 \
  --out "$out/pilot.json" > "$out/pilot.log" 2>&1 &
pilot=$!
# While the first pilot run builds the token cache (CPU work), the GPU checks the document mask.
python3 -m pytest -q -p no:cacheprovider tests/test_document_attention.py 2>&1 | tail -4 | tee "$out/document_mask.txt"
for shape in "--model small --block 64 --batch 32" "--model base --block 128 --batch 128"; do
  python3 bench/document_attention.py --device cuda --bf16 --objectives ar mlm --rounds 7 --steps 10 $shape \
    2>&1 | tail -5 | tee -a "$out/document_mask.txt"
done
wait $pilot
tail -14 "$out/pilot.log"
tar -czf "$out/pilot_runs.tar.gz" --exclude=checkpoints -C /tmp pilot
