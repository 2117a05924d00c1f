#!/usr/bin/env bash
# Here, on the CPU, before a lease: make what bench/gpu_lease.sh carries, then measure what the call would send.
#   bash bench/gpu_lease_prepare.sh           # builds what is missing, then checks the size; exit 1 if it cannot fit
#   bash bench/gpu_lease_prepare.sh --check   # the size check only (nothing downloaded or packed)
# What it builds (git-ignored; ~20 MB):
#   .gpu-carry/        ../shared/tools/gpu_carry.sh's wheels and gensim, gensim's C/C++/Cython sources deleted
#                      (its compiled extensions and the Wikipedia excerpt stay), and the joblib launcher's wheels that
#                      the study part launches with. No armlm wheel: the lease links the checkout that travels
#                      (bench/checkout_site.py), so it runs that code and no earlier build.
#   .gpu-data.tar.xz   CoNLL-2003 from $ARMLM_DATA_DIR (default ../shared/data), the one dataset the lease reads
# What travels is the checkout (tracked files, and untracked ones git does not ignore) plus the carry, 64 MiB at most
# (LIMIT_MIB). Where it does not fit this prints the line that sets aside what no part reads, and exits 1.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
limit_mib=${LIMIT_MIB:-64}
carry=(.gpu-carry .gpu-data.tar.xz)
if [ "${1:-}" != "--check" ]; then
  [ -d .gpu-carry/whl ] && [ -d .gpu-carry/site/gensim ] || bash ../shared/tools/gpu_carry.sh
  find .gpu-carry/site \( -name '*.c' -o -name '*.cpp' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' \) -delete
  rm -f .gpu-carry/whl/armlm-*.whl
  ls .gpu-carry/whl/hydra_joblib_launcher-*.whl > /dev/null 2>&1 ||
    python3 -m pip download -q --no-deps --only-binary=:all: -d .gpu-carry/whl hydra-joblib-launcher==1.2.0 joblib==1.6.0
  grep -qx '/.gpu-data.tar.xz' .git/info/exclude 2>/dev/null || echo '/.gpu-data.tar.xz' >> .git/info/exclude
  [ -s .gpu-data.tar.xz ] || tar -C "${ARMLM_DATA_DIR:-../shared/data}" -cJf .gpu-data.tar.xz conll2003
fi
for path in "${carry[@]}"; do
  [ -e "$path" ] || { echo "gpu_lease_prepare: $path is missing; run bash bench/gpu_lease_prepare.sh (no --check)" >&2
                      exit 1; }
done
# a tracked file deleted or set aside is listed by git but not sent: du skips it (and exits 1, which is no failure)
bytes() { { du -cb --files0-from=- 2>/dev/null || true; } | tail -n 1 | cut -f 1; }
checkout=$(git ls-files -z --cached --others --exclude-standard | bytes)
aside=$(git ls-files -z --cached --others --exclude-standard -- records docs notebooks | bytes)
carried=$(du -cb "${carry[@]}" | tail -n 1 | cut -f 1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
total=$(( checkout + carried ))
echo "travels: checkout $(mib "$checkout") MiB (records/, docs/, notebooks/: $(mib "$aside")) + carry $(mib "$carried") MiB = $(mib "$total") of $limit_mib MiB"
if [ "$total" -gt $(( limit_mib * 1048576 )) ]; then
  echo "gpu_lease_prepare: $(mib "$total") MiB would travel, over $limit_mib; set aside what no part reads, and bring it back after the call: mkdir -p ../aside && mv records docs notebooks ../aside/ (then mv ../aside/* . && git status --short)" >&2
  exit 1
fi
