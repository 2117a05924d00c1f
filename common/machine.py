"""Facts about the machine a process runs on, which a run's speed and numerics depend on: training chooses its CPU
precision by them (training.setup) and a study's record keeps them beside each unit (studies.keeping); and the one
process setting that depends on its C library (glibc's malloc), which every training process and speed bench makes.
It imports no torch or Lightning: the study driver reads it, and a bench process starts without them (common.devices
asks torch which devices are here)."""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_has_bf16_units() -> bool:
    """AVX512-BF16 or AMX: bf16 matrix products run natively, faster than fp32 (docs/results/recipe.md, "Default runs")."""
    try:
        flags = CPUINFO.read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_model() -> str:
    try:
        lines = CPUINFO.read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())


def keep_large_allocations_on_the_heap() -> None:
    """Stop glibc from handing a training step's memory back to the OS, so the next step does not page-fault
    it in again (every fresh page is a fault and 4 KB of zeroing; a 16 MB block of logits is 4,096 faults).
    - M_MMAP_MAX = 0: large tensors come from the heap, not from fresh mmaps unmapped when freed (faster for
      dense-head models: docs/results/performance.md, "Figures moved out of code comments");
    - M_TRIM_THRESHOLD at its maximum: the heap's freed top is kept, not trimmed at 128 KB. Without it an AR
      step in bf16 still faulted most of its pages in again, and kept was faster in bf16 and fp32 alike (page
      faults and timings: docs/results/performance.md, "bf16 on the CPU", item 2; bench/README.md).
    The process's memory stays at its peak, which a training process reaches every step anyway. A setting the
    environment makes, as MALLOC_MMAP_MAX_ / MALLOC_TRIM_THRESHOLD_ or as glibc.malloc.mmap_max /
    glibc.malloc.trim_threshold in GLIBC_TUNABLES, wins. bench/throughput.py applies it to every model it times,
    as train.py does."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return  # not glibc: nothing to tune
    # mallopt takes a C int: 2**31 - 1 is the largest threshold (a larger Python int would wrap to a small one).
    tunables = {item.split("=", 1)[0] for item in os.environ.get("GLIBC_TUNABLES", "").split(":") if "=" in item}
    for variable, tunable, option, value in (("MALLOC_MMAP_MAX_", "glibc.malloc.mmap_max", -4, 0),
                                             ("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold", -1, 2**31 - 1)):
        if variable not in os.environ and tunable not in tunables:  # mallopt would override the user's choice
            mallopt(ctypes.c_int(option), ctypes.c_int(value))
