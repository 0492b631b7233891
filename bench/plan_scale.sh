#!/usr/bin/env bash
# Planning time and peak memory of `weftctl plan` as the mesh grows from 512 to 4096 ranks, timed
# by GNU time (wall seconds, peak resident memory) on the real weftctl, text and --json output.
#  - pp: [dp, 8, 8] meshes named [dp, pp, mp] with dp 8, 16, 32, 64, a 16-linear-layer MLP (1024
#    wide, relu between) pipelined over pp (1F1B, 8 micro-batches, two layers per stage),
#    tensor-parallel over mp (parallelize: column / row alternating), data-parallel over dp.
#  - tp: [dp, 8] meshes named [dp, mp], the seed's MLP 1024 -> 4096 -> 1024, column / row over
#    mp.
# Both are also run by a baseline weftctl when WEFT_BASELINE_WEFTCTL names one (e.g. built from the
#    commit before the planner redesign, 32606d6: `git worktree add /tmp/old 32606d6 && cd
#    /tmp/old && bazel build //client:weftctl`), side by side in the same run.
# Usage: bash bench/plan_scale.sh   [WEFT_BASELINE_WEFTCTL=/path/to/old/weftctl]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bash tools/setup.sh --bench >/dev/null
bazel build //client:weftctl >/dev/null 2>&1
weftctl=bazel-bin/client/weftctl
baseline=${WEFT_BASELINE_WEFTCTL:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# pp_spec DP: the pipelined job on a [DP, 8, 8] mesh.
pp_spec() {
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

# tp_spec DP: the seed's MLP on a [DP, 8] mesh.
tp_spec() {
  local dp=$1
  cat <<YAML
name: scale
mesh: {shape: [$dp, 8], dim_names: [dp, mp]}
parallelize:
  mp: {dim: mp, plan: {fc0: ColWiseParallel, fc1: RowWiseParallel}}
model:
  layers:
    - {name: fc0, type: linear, in_features: 1024, out_features: 4096}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 4096, out_features: 1024}
  loss: mse
data: {source: synthetic, sample_shape: [1024], label_shape: [1024], num_samples: $((dp * 32)), batch_size: $((dp * 4))}
optimizer: {type: adamw, lr: 1.0e-3, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: 10, seed: 1}
YAML
}

# measure LABEL BINARY SPEC RANKS FORMAT: one row.
measure() {
  local label=$1 bin=$2 spec=$3 ranks=$4 format=$5 flags=() seconds kib
  [[ $format == json ]] && flags=(--json)
  if ! /usr/bin/time -f "%e %M" -o "$dir/time" "$bin" plan "${flags[@]}" "$spec" > /dev/null 2> "$dir/err"; then
    printf '%-9s %-7s %-7s %s\n' "$label" "$ranks" "$format" "failed: $(tail -c 200 "$dir/err" | tr '\n' ' ')"
    return
  fi
  read -r seconds kib < <(tail -1 "$dir/time")
  printf '%-9s %-7s %-7s %10s %12.1f %14.3f\n' "$label" "$ranks" "$format" "$seconds" \
    "$(echo "$kib / 1024" | bc -l)" "$(echo "$seconds * 1024 / $ranks" | bc -l)"
}

header() { printf '%-9s %-7s %-7s %10s %12s %14s\n' planner ranks output seconds "peak MiB" "s per 1k ranks"; }

bench_header
echo
echo "pp: 16 x linear 1024->1024 (relu between), mesh [dp, 8, 8] (dp, pp, mp), 1F1B x 8 micro-batches"
header
for dp in 8 16 32 64; do
  pp_spec "$dp" > "$dir/pp$dp.yaml"
  for format in text json; do
    measure weft "$weftctl" "$dir/pp$dp.yaml" $((dp * 64)) "$format"
    [[ -z $baseline ]] || measure baseline "$baseline" "$dir/pp$dp.yaml" $((dp * 64)) "$format"
  done
done
echo
echo "tp: 1024 -> 4096 -> relu -> 1024, mesh [dp, 8] (dp, mp), column / row over mp"
header
for dp in 64 128 256 512; do
  tp_spec "$dp" > "$dir/tp$dp.yaml"
  for format in text json; do
    measure weft "$weftctl" "$dir/tp$dp.yaml" $((dp * 8)) "$format"
    [[ -z $baseline ]] || measure baseline "$baseline" "$dir/tp$dp.yaml" $((dp * 8)) "$format"
  done
done
