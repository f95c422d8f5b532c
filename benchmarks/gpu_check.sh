#!/usr/bin/env bash
# One prepared GPU check: the project's speed benchmarks on one GPU, in under 8 minutes.
# Never part of CI (CI has no GPU). On a machine with an NVIDIA GPU:
#
#     pip install ".[cuda]"
#     bash benchmarks/gpu_check.sh [OUT]        # OUT defaults to gpu_check/
#
# It writes OUT/report.md (every step's command, output, exit code and wall time) and
# OUT/fig5/ (one small `neural reproduce` figure). Each step has its own time limit
# (`timeout`), so one slow or failing step is reported and the others still run; the
# limits add up to 615 s. Copy the report's numbers into docs/devices.md.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu_check}"
mkdir -p "$out"
report="$out/report.md"
py="${PYTHON:-python}"

{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$report.tmp"
mv "$report.tmp" "$report"

step() {   # step TITLE LIMIT_S COMMAND...
  local title="$1" limit="$2"
  shift 2
  local start end rc
  start=$(date +%s)
  {
    echo
    echo "## $title"
    echo
    echo "\`$*\` (limit ${limit} s)"
    echo
    echo '```'
  } >> "$report"
  timeout "$limit" "$@" >> "$report" 2>&1
  rc=$?
  end=$(date +%s)
  {
    echo '```'
    echo
    echo "exit code $rc$([ "$rc" = 124 ] && echo ' (time limit reached)'), $((end - start)) s"
  } >> "$report"
  echo "$title: exit $rc, $((end - start)) s"
}

step "Device" 20 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv; $py -c 'import jax; print(jax.__version__, jax.devices())'"
# The training scaffold against a plain jitted loop (batch 64 and 512), and agents vmapped
# against one after the other: the last table's "vmapped / one agent" is the GPU target.
step "Training, 1, 2 and 5 agents" 120 "$py" benchmarks/train_speed.py --agents 1,2,5 \
  --repeats 2
# The convolutions of M agents' CNNs in one program, by route (grouped, block-diagonal,
# unrolled, im2col): what the vmapped training step's convolutions cost per agent.
step "Convolution routes, 1, 2, 5 and 10 agents" 60 "$py" benchmarks/conv_routes.py \
  --agents 1,2,5,10
# float32 K @ v at JAX's default precision (TF32 on tensor cores) and at full precision.
step "float32 matrix products" 40 "$py" benchmarks/matmul_precision.py
# closed_form.py and devices.py default to JAX_PLATFORMS=cpu (for the 2-core numbers in the
# docs); here they are pinned to the GPU.
step "Closed forms" 75 env JAX_PLATFORMS=cuda "$py" benchmarks/closed_form.py --rounds 200 \
  --repeats 2
step "Rate grid" 35 "$py" benchmarks/rates.py
step "Matrix-free, N = 200,000, float32" 50 "$py" benchmarks/scale.py --sizes 200000 \
  --device gpu --dtype float32
step "Matrix-free, N = 200,000, float64" 70 "$py" benchmarks/scale.py --sizes 200000 \
  --device gpu --dtype float64
# The sharded trajectory on the one GPU (a one-device mesh: the sharded program and its
# numbers against fedkrr.trajectory; several devices need several GPUs).
step "Sharded trajectory" 60 env JAX_PLATFORMS=cuda "$py" benchmarks/devices.py --devices 1 \
  --rounds 50
step "neural reproduce, Fig. 5 (small, one seed)" 85 "$py" -m neural reproduce --figure 5 \
  --seeds 1 --no-progress --workdir "$out/fig5"
echo "report: $report"
