#!/usr/bin/env bash
# GPU figures of one node: the CUDA backend's matmul against cuBLAS called directly and NCCL
# all-reduce bus bandwidth (bench/gpu_bench), then the quickstart model's time per training step
# through the real daemons (`weftctl local --json`) on cuda:0, next to the same job on the CPU.
# The quickstart runs on 1 rank: its mesh [4] is rewritten to [1] (the global batch of 32 stays,
# all on the one rank) and its 10 steps to 35, so that the median is over steps 6-35 as in
# bench/mlp_step.sh; then with batch 512 (the seed's), where the GPU has work to do, in f32, TF32
# and bf16.
# Usage: bash bench/gpu.sh [gpu_bench flags, e.g. --iters=100 --sections=matmul]
#        (from the repository root, on a node with an NVIDIA GPU and CUDA at /usr/local/cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source bench/lib.sh

bench_header
if command -v nvidia-smi >/dev/null 2>&1; then
  if ! gpus=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$gpus"; then
    echo "gpu.sh: no NVIDIA GPU on this machine; nvidia-smi -L says: ${gpus:-nothing}" >&2
    exit 1
  fi
  sed 's/^/  /' <<<"$gpus"
else
  echo "  (no nvidia-smi; gpu_bench checks for a GPU itself)"
fi
echo

if ! bazel build --config=cuda //... >"$tmp/build.log" 2>&1; then
  echo "gpu.sh: bazel build --config=cuda //... failed:" >&2
  tail -20 "$tmp/build.log" >&2
  exit 1
fi
bazel-bin/bench/gpu_bench "$@" || {
  rc=$?
  echo "gpu.sh: gpu_bench failed (exit $rc); see its message above" >&2
  exit 1
}

echo
sed -e 's/^mesh: {shape: \[4\]/mesh: {shape: [1]/' -e 's/^train: {steps: 10,/train: {steps: 35,/' \
  examples/quickstart.yaml >"$tmp/quickstart.yaml"
if ! grep -q '^mesh: {shape: \[1\]' "$tmp/quickstart.yaml" ||
   ! grep -q '^train: {steps: 35,' "$tmp/quickstart.yaml"; then
  echo "gpu.sh: examples/quickstart.yaml changed: expected 'mesh: {shape: [4]' and" \
       "'train: {steps: 10,' lines to rewrite for 1 rank and 35 steps" >&2
  exit 1
fi
sed 's/^\(  batch_size:\) 32 /\1 512/' "$tmp/quickstart.yaml" >"$tmp/quickstart512.yaml"
grep -q '^  batch_size: 512' "$tmp/quickstart512.yaml" || {
  echo "gpu.sh: examples/quickstart.yaml changed: no 'batch_size: 32' line to rewrite" >&2
  exit 1
}
{ cat "$tmp/quickstart512.yaml"; echo "allow_tf32: true"; } >"$tmp/quickstart512_tf32.yaml"
{ cat "$tmp/quickstart512.yaml"; echo "precision: bf16"; } >"$tmp/quickstart512_bf16.yaml"
echo "quickstart: 1024 -> 4096 -> relu -> 1024, no bias, AdamW, synthetic data; 1 rank (mesh [1]);"
echo "median and min step_seconds over steps 6-35"
printf '%-44s %10s %10s\n' "run" "median s" "min s"
failed=0
run() {  # label device spec
  if ! bazel-bin/client/weftctl local --ranks 1 --device "$2" --json "$3" \
      >"$tmp/run.jsonl" 2>"$tmp/run.err"; then
    echo "gpu.sh: $1 failed:" >&2
    tail -n 3 "$tmp/run.jsonl" "$tmp/run.err" >&2
    failed=1
    return
  fi
  read -r med min < <(median_step <"$tmp/run.jsonl")
  printf '%-44s %10s %10s\n' "$1" "$med" "$min"
}
run "batch 32, f32, cuda:0" cuda "$tmp/quickstart.yaml"
run "batch 32, f32, cpu (${cores} threads)" cpu "$tmp/quickstart.yaml"
run "batch 512, f32, cuda:0" cuda "$tmp/quickstart512.yaml"
run "batch 512, tf32, cuda:0" cuda "$tmp/quickstart512_tf32.yaml"
run "batch 512, bf16 matmuls, cuda:0" cuda "$tmp/quickstart512_bf16.yaml"
run "batch 512, f32, cpu (${cores} threads)" cpu "$tmp/quickstart512.yaml"
exit "$failed"
