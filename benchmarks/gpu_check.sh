#!/usr/bin/env bash
# The GPU check, for a contributor with one NVIDIA GPU (H100/H200 class, ~80 GB):
#   bash benchmarks/gpu_check.sh            # SHAPE=qwen3-4b by default, OUT=benchmarks/results
# It needs jax[cuda], flax, optax, orbax, chex, torch, transformers, peft and trl==1.16.0.
# On a machine without network, fetch the trl wheel elsewhere first
#   pip download --no-deps trl==1.16.0 -d .gpu_wheels
# and copy .gpu_wheels/ into the checkout: it is installed from there. Without trl the
# PyTorch side is skipped. It takes a few minutes and writes $OUT/gpu_check-qwen3-4b.json
# (what it measures: benchmarks/gpu_check.py and benchmarks/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.45   # leave room for PyTorch in the same run
if [ -d .gpu_wheels ] && ! python -c "import trl" 2>/dev/null; then
  pip install --no-deps --no-index --find-links .gpu_wheels trl==1.16.0 -q || echo "trl install failed: PyTorch side skipped"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 450 python -m benchmarks.gpu_check --shape "${SHAPE:-qwen3-4b}" --out "${OUT:-benchmarks/results}"
