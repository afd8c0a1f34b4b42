#!/usr/bin/env bash
# The GPU check: the paper's shapes (Qwen3-4B, 4 LoRA agents, prompt 800 + completion 1000)
# on one NVIDIA GPU of ~80 GB (H100/H200 class), all of it inside 10 minutes:
#
#   bash benchmarks/gpu_check.sh [extra gpu_check options, e.g. --set rl.remat=dots]
#
# What it measures and why those shapes: benchmarks/gpu_check.py and benchmarks/README.md
# ("On a GPU"). Writes $OUT/gpu_check-$SHAPE.{json,md,log} (OUT defaults to
# benchmarks/results); the JSON follows benchmarks/results_schema.json.
# Environment: SHAPE (qwen3-4b; tiny = the CPU smoke test), OUT, BUDGET_S (540: the parts'
# wall-clock budget), TOTAL_S (595: hard limit of this whole script).
#
# Python packages. Besides the project's own (jax with CUDA, flax, optax, orbax-checkpoint,
# chex, numpy, pyyaml, transformers, torch, peft), the check imports packages that a GPU
# image may lack. A machine without network gets them as wheels in .whl/ at the checkout's
# root, fetched beforehand on a machine with network (Python 3.12, x86-64 Linux):
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl \
#     pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 \
#     trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
#
# - pydantic and its three: coevo_jax's config loader (every part needs them);
# - trl and datasets, dill, multiprocess: the PyTorch side (without them it is skipped
#   and the JSON says why). datasets 5.2 wants pyarrow >= 24 and huggingface-hub >= 1.31:
#   check `python3 -m pip show pyarrow huggingface-hub` there and carry newer ones if not;
# - optional: jsonschema, jsonschema-specifications, referencing, rpds-py to validate the
#   JSON against the schema on the spot (skipped without them).
# Keep one version of each. They are installed below into /tmp/gpu_check_site, nothing else.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# Each JAX part runs alone on the GPU (the PyTorch part is another, later process), so JAX may
# take most of it; the default 75 % would leave 20 GB of an 80 GB card unused.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.90}"
SHAPE="${SHAPE:-qwen3-4b}"
OUT="${OUT:-benchmarks/results}"
TOTAL_S="${TOTAL_S:-595}"

if compgen -G ".whl/*.whl" >/dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/gpu_check_site .whl/*.whl; then
    export PYTHONPATH="/tmp/gpu_check_site:$PYTHONPATH"
  else
    echo "gpu_check.sh: installing .whl/ failed; parts that need those packages will say so" >&2
  fi
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# The parts' budget leaves ~45 s of the hard limit for start-up, writing the JSON and the
# last part's kill; `timeout` is the backstop if anything hangs past it.
left=$((TOTAL_S - (SECONDS - start)))
budget="${BUDGET_S:-$((left - 45 < 540 ? left - 45 : 540))}"
exec timeout -k 5 "$left" python3 -m benchmarks.gpu_check --shape "$SHAPE" --out "$OUT" \
  --budget-s "$budget" "$@"
