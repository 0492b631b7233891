#!/usr/bin/env bash
# Steady-state time per training step of the seed's MLP (bench/mlp_step.yaml) through the real
# daemons on 1 rank and 2-rank data parallel, next to the same step in Debian's PyTorch with the
# same thread count, and the CPU backend's matmul throughput against OpenBLAS sgemm direct.
# Usage: bash bench/mlp_step.sh   (from the repository root; installs python3-torch if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --bench >/dev/null
bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker \
  //bench:matmul_bench >/dev/null 2>&1
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source bench/lib.sh

bench_header
echo "model: 1024 -> 4096 -> relu -> 1024, no bias, batch 512, AdamW, float32"
echo
printf '%-34s %10s %10s\n' "run" "median s" "min s"
write_random_npy "$tmp" 2048 1024
for ranks in 1 2; do
  sed "s/shape: \[1\]/shape: [$ranks]/" bench/mlp_step.yaml > "$tmp/mlp$ranks.yaml"
  threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
  read -r med min < <(OPENBLAS_NUM_THREADS=$threads bazel-bin/client/weftctl local --ranks "$ranks" \
      --json "$tmp/mlp$ranks.yaml" | median_step)
  printf '%-34s %10s %10s\n' "weft ${ranks} rank(s), ${threads} thread(s) each" "$med" "$min"
done
for threads in "$cores"; do
  read -r med min < <(OPENBLAS_NUM_THREADS=$threads /usr/bin/python3 bench/torch_mlp.py "$threads" 30 | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
print("%.4f %.4f" % (d["median_step_seconds"], d["min_step_seconds"]))')
  printf '%-34s %10s %10s\n' "pytorch 1 process, ${threads} thread(s)" "$med" "$min"
done
echo
OPENBLAS_NUM_THREADS=$cores bazel-bin/bench/matmul_bench
