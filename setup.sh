#!/usr/bin/env bash
# Create .venv and install armlm with its test extras. torch==2.13.0 goes in first: every later
# requirement on torch is then already satisfied and pip never pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[dev]"
echo "armlm installed in $(pwd)/.venv"
