#!/usr/bin/env bash
# GPU figures of one node: the CUDA backend's matmul against cuBLAS called directly and NCCL
# all-reduce bus bandwidth (bench/gpu_bench), then the quickstart model's time per training step
# through the real daemons (`weftctl local --json`) on cuda:0, next to the same job on the CPU.
# The quickstart runs on 1 rank: its mesh [4] is rewritten to [1] (the global batch of 32 stays,
# all on the one rank) and its 10 steps to 35, so that the median is over steps 6-35 as in
# bench/mlp_step.sh.
# Usage: bash bench/gpu.sh [gpu_bench flags, e.g. --iters=100 --sections=matmul]
#        (from the repository root, on a node with an NVIDIA GPU and CUDA at /usr/local/cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median_step() {  # stdin: weftctl --json lines; skips the first 5 steps (warm-up)
  python3 -c '
import json, statistics, sys
t = [json.loads(l)["step_seconds"] for l in sys.stdin if l.startswith("{\"type\":\"step\"")]
t = t[5:]
print("%.4f %.4f" % (statistics.median(t), min(t)) if t else "- -")'
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), ${cores} cores"
if command -v nvidia-smi >/dev/null 2>&1; then
  if ! gpus=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$gpus"; then
    echo "gpu.sh: no NVIDIA GPU on this machine; nvidia-smi -L says: ${gpus:-nothing}" >&2
    exit 1
  fi
  sed 's/^/  /' <<<"$gpus"
else
  echo "  (no nvidia-smi; gpu_bench checks for a GPU itself)"
fi
echo "date: $(date -u +%Y-%m-%d)   commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')"
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
echo "quickstart: 1024 -> 4096 -> relu -> 1024, no bias, batch 32, AdamW, float32, synthetic data;"
echo "1 rank (mesh [1]); median and min step_seconds over steps 6-35"
printf '%-34s %10s %10s\n' "run" "median s" "min s"
failed=0
for device in cuda cpu; do
  label="weft 1 rank, cuda:0"
  [[ $device == cpu ]] && label="weft 1 rank, cpu, ${cores} thread(s)"
  if ! bazel-bin/client/weftctl local --ranks 1 --device "$device" --json "$tmp/quickstart.yaml" \
      >"$tmp/$device.jsonl" 2>"$tmp/$device.err"; then
    echo "gpu.sh: quickstart on $device failed:" >&2
    tail -n 3 "$tmp/$device.jsonl" "$tmp/$device.err" >&2
    failed=1
    continue
  fi
  read -r med min < <(median_step <"$tmp/$device.jsonl")
  printf '%-34s %10s %10s\n' "$label" "$med" "$min"
done
exit "$failed"
