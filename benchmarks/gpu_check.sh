#!/usr/bin/env bash
# One call on a lent H200 (no network; jax, flax, optax, orbax, chex, torch, transformers and
# peft are there, trl is not). Prepare the trl wheel first, here:
#   pip download --no-deps trl==1.16.0 -d .gpu_wheels
# then run this with the device tool, carrying .gpu_wheels. Finishes in a few minutes and
# writes $OUT/gpu_check-qwen3-4b.json.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.45   # leave room for PyTorch in the same run
if [ -d .gpu_wheels ] && ! python -c "import trl" 2>/dev/null; then
  pip install --no-deps --no-index --find-links .gpu_wheels trl==1.16.0 -q || echo "trl install failed: PyTorch side skipped"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 450 python -m benchmarks.gpu_check --shape "${SHAPE:-qwen3-4b}" --out "${OUT:-benchmarks/results}"
