#!/usr/bin/env bash
# Planning time and peak memory of `weftctl plan` as the mesh grows: [dp, 8, 8] meshes named
# [dp, pp, mp] with dp 8, 16, 32, 64 (512 .. 4096 ranks), a 16-linear-layer MLP (1024 wide, relu
# between) pipelined over pp (1F1B, 8 micro-batches, two layers per stage) and tensor-parallel
# over mp (parallelize: column / row alternating), data-parallel over dp. Each size is planned
# by the real weftctl, text and --json, timed by GNU time (wall seconds, peak resident memory).
# Usage: bash bench/plan_scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bash tools/setup.sh --bench >/dev/null
bazel build //client:weftctl >/dev/null 2>&1
weftctl=bazel-bin/client/weftctl
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# spec DP: the job on a [DP, 8, 8] mesh.
spec() {
  local dp=$1 layers="" plan="" i
  for i in $(seq 0 15); do
    layers+="    - {name: fc$i, type: linear, in_features: 1024, out_features: 1024}"$'\n'
    [[ $i -lt 15 ]] && layers+="    - {name: act$i, type: relu}"$'\n'
    plan+="fc$i: $([[ $((i % 2)) -eq 0 ]] && echo ColWiseParallel || echo RowWiseParallel), "
  done
  cat <<YAML
name: scale
mesh: {shape: [$dp, 8, 8], dim_names: [dp, pp, mp]}
pipeline: {dim: pp, schedule: 1F1B, micro_batches: 8}
parallelize:
  mp: {dim: mp, plan: {${plan%, }}}
model:
  layers:
${layers}data: {source: synthetic, sample_shape: [1024], label_shape: [1024], num_samples: $((dp * 32)), batch_size: $((dp * 8))}
optimizer: {type: adamw, lr: 1.0e-3, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: 10, seed: 1}
YAML
}

bench_header
echo "model: 16 x linear 1024->1024 (relu between), mesh [dp, 8, 8] (dp, pp, mp), 1F1B x 8 micro-batches"
echo
printf '%-7s %-8s %10s %12s %14s\n' ranks output seconds "peak MiB" "s per 1k ranks"
for dp in 8 16 32 64; do
  spec "$dp" > "$dir/scale$dp.yaml"
  ranks=$((dp * 64))
  for format in text json; do
    flags=()
    [[ $format == json ]] && flags=(--json)
    /usr/bin/time -f "%e %M" -o "$dir/time" "$weftctl" plan "${flags[@]}" "$dir/scale$dp.yaml" > /dev/null
    read -r seconds kib < "$dir/time"
    printf '%-7s %-8s %10s %12.1f %14.3f\n' "$ranks" "$format" "$seconds" "$(echo "$kib / 1024" | bc -l)" \
      "$(echo "$seconds * 1024 / $ranks" | bc -l)"
  done
done
