"""Facts about the machine a process runs on, which a run's speed and numerics depend on: training chooses its CPU
precision by them (training.setup) and a study's record keeps them beside each unit (studies.keeping). It imports
no torch: the study driver reads it (common.devices asks torch which devices are here)."""

from __future__ import annotations

import platform
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

