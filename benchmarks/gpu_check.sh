#!/usr/bin/env bash
# The prepared GPU check: what a GPU user runs, in parts of at most 9 minutes each (one
# device call per part). Never part of CI (CI has no GPU). On a machine with an NVIDIA GPU:
#
#     pip install ".[cuda]"        # or the project on PYTHONPATH beside the image's JAX
#     bash benchmarks/gpu_check.sh OUT [PART ...]
#
# Parts (default: all, one after the other; the times are upper bounds, the limits):
#   bench        the speed benchmarks: training, convolutions, float32 products, closed
#                forms, rate grid, matrix-free at N = 200,000, sharded trajectory (~260 s)
#   suite        the whole test suite on the GPU, -rfE, a per-test limit (pytest-timeout),
#                every failure listed in the report (SUITE_WORKERS, TEST_TIMEOUT,
#                SUITE_ARGS: more pytest arguments, e.g. test paths; 540 s)
#   figures      every figure at small scale with one seed (`neural reproduce --figure N
#                --seeds 1 --jobs auto`), FedAvg's included (540 s)
#   configs      every shipped small config of the other four papers' methods (540 s)
#   scale        the matrix-free path at N = 1,000,000 in float64, 20 AvgKD rounds: time,
#                kernel passes, entries per second (SCALE_N, SCALE_ROUNDS; 540 s)
#   paper        Fig. 6 at paper scale on synthetic data of MNIST's shape and size
#                (benchmarks/fake_mnist.py): what a paper-scale figure costs on one GPU;
#                its verdicts mean nothing (PAPER_MAX_ROUNDS to time the first rounds; 540 s)
#   determinism  one small run twice as it is and twice with --deterministic: whether the
#                metrics agree to the byte, and what the flag costs (240 s)
#   scaleout     Fig. 6 small with 3 seeds by the local pool (--jobs auto) and by batched
#                runs (--batch auto), then Fig. 6 at paper scale on synthetic MNIST-shaped
#                data, its first round of every run and one more by workers and batched,
#                extrapolated to the whole figure (benchmarks/scale_out.py; SCALEOUT_EPOCHS
#                epochs a round, the figure's time scaled to its 20; 540 s)
#
# It writes OUT/report.md (every step's command, output, exit code and wall time) and the
# steps' folders under OUT. Each step has its own time limit (`timeout`), so one slow or
# failing step is reported and the others still run. Copy the numbers into docs/.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu_check}"
shift || true
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(scaleout bench suite figures configs scale paper determinism)
known=" scaleout bench suite figures configs scale paper determinism "
for part in "${parts[@]}"; do
  if [[ "$known" != *" $part "* ]]; then
    echo "gpu_check.sh: unknown part '$part' (expected some of:$known)" >&2
    exit 2
  fi
done
mkdir -p "$out"
report="$out/report.md"
py="${PYTHON:-python}"
# Several processes share the GPU (pytest's workers, --jobs workers): each allocates as it
# goes instead of the first reserving most of the memory.
export XLA_PYTHON_CLIENT_PREALLOCATE="${XLA_PYTHON_CLIENT_PREALLOCATE:-false}"

{
  echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ)): ${parts[*]}"
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

step "Device" 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv; $py -c 'import sys, jax, flax, optax; print(sys.version.split()[0], \
  \"jax\", jax.__version__, \"flax\", flax.__version__, \"optax\", optax.__version__, \
  jax.devices())'"

part_bench() {
  # The training scaffold against a plain jitted loop (batch 64 and 512), and agents
  # vmapped against one after the other: the last table's "vmapped / one agent".
  step "Training, 1, 2 and 5 agents" 120 "$py" benchmarks/train_speed.py --agents 1,2,5 \
    --repeats 2
  # M agents' CNN convolutions in one program, by route (grouped, block-diagonal,
  # unrolled, im2col): what the vmapped training step's convolutions cost per agent.
  step "Convolution routes, 1, 2, 5 and 10 agents" 60 "$py" benchmarks/conv_routes.py \
    --agents 1,2,5,10
  # float32 K @ v at JAX's default precision (TF32 on tensor cores) and at full precision.
  step "float32 matrix products" 40 "$py" benchmarks/matmul_precision.py
  # closed_form.py and devices.py default to JAX_PLATFORMS=cpu (for the 2-core numbers in
  # the docs); here they are pinned to the GPU.
  step "Closed forms" 75 env JAX_PLATFORMS=cuda "$py" benchmarks/closed_form.py \
    --rounds 200 --repeats 2
  step "Rate grid" 35 "$py" benchmarks/rates.py
  step "Matrix-free, N = 200,000, float32" 50 "$py" benchmarks/scale.py --sizes 200000 \
    --device gpu --dtype float32
  step "Matrix-free, N = 200,000, float64" 70 "$py" benchmarks/scale.py --sizes 200000 \
    --device gpu --dtype float64
  # The sharded trajectory on a one-GPU mesh (several devices need several GPUs).
  step "Sharded trajectory" 60 env JAX_PLATFORMS=cuda "$py" benchmarks/devices.py \
    --devices 1 --rounds 50
}

part_suite() {
  # The README's test command on the GPU: every worker shares the one GPU. -v keeps a line
  # per test in suite.log, so a run stopped at its limit still shows what failed.
  local log="$out/suite.log"
  step "Test suite" "${SUITE_LIMIT:-540}" bash -c "\"$py\" -m pytest -p no:cacheprovider -v \
    -rfE -n ${SUITE_WORKERS:-8} --dist loadfile --timeout ${TEST_TIMEOUT:-300} ${SUITE_ARGS:-} \
    > '$log' 2>&1; rc=\$?; echo \"pytest exit code \$rc\"; \
    grep -E '(FAILED|ERROR) (tests|notebooks)/' '$log' | sed -E 's/^.*(FAILED|ERROR) /\\1 /' \
    | sort -u; tail -n 3 '$log'; exit \$rc"
}

part_figures() {
  local figure
  for figure in ${FIGURES:-4 5 6 8 9 10 11 12 13 14 15}; do
    step "neural reproduce, Fig. $figure (small, one seed)" "${FIGURE_LIMIT:-240}" \
      "$py" -m neural reproduce --figure "$figure" --seeds 1 --jobs auto --no-progress \
      --workdir "$out/figures/fig$figure"
  done
}

part_configs() {
  local config
  for config in ${CONFIGS:-ddist_small ddist_fig3_small mhd_small mhd_ablation_small \
      mhd_topology_small repshare_small repshare_lambdas_small feddkc_small \
      feddkc_mnist_small}; do
    step "neural run --config $config" "${CONFIG_LIMIT:-240}" "$py" -m neural run \
      --config "$config" --no-progress --workdir "$out/configs/$config"
  done
}

part_scale() {
  step "Matrix-free, N = ${SCALE_N:-1000000}, float64, ${SCALE_ROUNDS:-20} AvgKD rounds" \
    "${SCALE_LIMIT:-540}" "$py" benchmarks/scale.py --sizes "${SCALE_N:-1000000}" \
    --rounds "${SCALE_ROUNDS:-20}" --device gpu --dtype float64 --timeout 3600
}

part_paper() {
  step "Synthetic MNIST-shaped data" 60 "$py" benchmarks/fake_mnist.py "$out/fake_mnist"
  local rounds=()
  [ -n "${PAPER_MAX_ROUNDS:-}" ] && rounds=(--max-rounds "$PAPER_MAX_ROUNDS")
  step "neural reproduce, Fig. 6 at paper scale on synthetic data (verdicts meaningless)" \
    "${PAPER_LIMIT:-540}" "$py" -m neural reproduce --figure 6 --scale paper --seeds 1 \
    --jobs auto --no-progress --data-dir "$out/fake_mnist" "${rounds[@]}" \
    --workdir "$out/fig6_paper"
}

part_determinism() {
  # AvgKD and PKD on the same split: their round 0 is each agent's local training, the
  # same fits. Each command twice, as it is and with --deterministic.
  local mode protocol k
  local run=("$py" -m neural run --dataset mnist-subset --train-subset 2000 --test-subset 500
             --models cnn --partition label-split --alpha 0.1 --rounds 3 --epochs 5
             --no-progress)
  for mode in default deterministic; do
    local flag=()
    [ "$mode" = deterministic ] && flag=(--deterministic)
    for protocol in avgkd pkd; do
      for k in 1 2; do
        step "Determinism: $protocol, $mode, run $k" 60 "${run[@]}" --protocol "$protocol" \
          "${flag[@]}" --workdir "$out/determinism/$mode-$protocol-$k"
      done
    done
    step "Determinism: $mode, same metrics?" 30 "$py" - "$out/determinism" "$mode" <<'EOF'
import json, sys
from pathlib import Path
root, mode = Path(sys.argv[1]), sys.argv[2]
def rows(name):
  return [json.loads(l) for l in (root / name / "metrics.jsonl").read_text().splitlines()]
for protocol in ("avgkd", "pkd"):
  a, b = rows(f"{mode}-{protocol}-1"), rows(f"{mode}-{protocol}-2")
  print(f"{protocol}: run 1 == run 2 byte for byte: {a == b}; test accuracy per row: "
        + " ".join(f"{r['test_accuracy']:.4f}" for r in a))
r0 = lambda rs: [(r["agent"], r["test_accuracy"], r["test_loss"]) for r in rs if r["round"] == 0]
print(f"round 0 (local training) of avgkd == of pkd: "
      f"{r0(rows(mode + '-avgkd-1')) == r0(rows(mode + '-pkd-1'))}")
EOF
  done
}

part_scaleout() {
  # The goals on one H100: Fig. 6 small with 3 seeds in 20 s; a paper-scale seed of Fig. 6
  # in under 30 minutes.
  step "Fig. 6 small, 3 seeds, the local pool (--jobs auto)" 200 "$py" -m neural reproduce \
    --figure 6 --seeds 3 --jobs auto --no-progress --workdir "$out/scaleout/workers"
  step "Fig. 6 small, 3 seeds, batched runs (--batch auto)" 200 "$py" -m neural reproduce \
    --figure 6 --seeds 3 --batch auto --no-progress --workdir "$out/scaleout/batched"
  step "Synthetic MNIST-shaped data" 60 "$py" benchmarks/fake_mnist.py "$out/fake_mnist"
  step "Fig. 6 at paper scale, first rounds, workers vs batched (extrapolated)" 300 \
    "$py" benchmarks/scale_out.py --scale paper --data-dir "$out/fake_mnist" --seeds 1 \
    --ways batch,workers --jobs auto --set "epochs=${SCALEOUT_EPOCHS:-2}" --rounds-timed 1 \
    --epochs-of-figure 20
}

for part in "${parts[@]}"; do
  echo "== $part"
  "part_$part"
done
echo "report: $report"
