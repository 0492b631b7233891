#!/usr/bin/env bash
# Per-step time of the seed MLP (1024 -> 4096 -> relu -> 1024, no bias, batch 512, AdamW, npy
# data) on 1 rank, DP2, MP2 (fc0 Shard(1), fc1 Shard(0)) and DP2 x MP2 through the real daemons
# (`weftctl local --json`), and the bytes moved per step as the planner predicts them
# (`weftctl plan --json`: total_bytes_per_step, else bench/plan_bytes) next to what the Gloo
# communicators counted (bytes_sent of the step lines, summed over ranks by the coordinator).
# Usage: bash bench/tp_step.sh   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --bench >/dev/null
bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker \
  //bench:plan_bytes >/dev/null 2>&1
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source bench/lib.sh

bench_header
echo "model: 1024 -> 4096 -> relu -> 1024, no bias, batch 512, AdamW, float32; median of steps 6-35"
echo
write_random_npy "$tmp" 2048 1024

predicted() {  # spec -> total_bytes_per_step as the planner reports it, and which tool said so
  local out
  if out=$(bazel-bin/client/weftctl plan --json "$1" 2>/dev/null) &&
     n=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes_per_step"])' \
         <<<"$out" 2>/dev/null) && [[ -n "$n" ]]; then
    echo "$n weftctl-plan"
  else
    echo "$(bazel-bin/bench/plan_bytes "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes_per_step"])') plan_bytes"
  fi
}

printf '%-10s %5s %8s %10s %8s %14s %14s %8s\n' run ranks threads "median s" "min s" \
  "predicted B" "measured B" "meas/pred"
for run in 1rank:1 dp2:2 mp2:2 dp2_mp2:4; do
  name=${run%%:*}
  ranks=${run##*:}
  cp "bench/tp_$name.yaml" "$tmp/"
  spec="$tmp/tp_$name.yaml"
  threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
  read -r pred source < <(predicted "$spec")
  OPENBLAS_NUM_THREADS=$threads bazel-bin/client/weftctl local --ranks "$ranks" --json "$spec" \
      > "$tmp/$name.jsonl" || { echo "$name: weftctl local failed:"; tail -3 "$tmp/$name.jsonl"; continue; }
  python3 - "$name" "$ranks" "$threads" "$pred" "$tmp/$name.jsonl" <<'PY'
import json, statistics, sys
name, ranks, threads, pred, path = sys.argv[1:]
steps = [json.loads(l) for l in open(path) if l.startswith('{"type":"step"')]
t = [s["step_seconds"] for s in steps[5:]]
b = sorted({s["bytes_sent"] for s in steps})
meas = b[0] if len(b) == 1 else "%d..%d" % (b[0], b[-1])
ratio = "%.4f" % (b[0] / int(pred)) if int(pred) > 0 else "-"
print("%-10s %5s %8s %10.4f %8.4f %14s %14s %8s" % (name, ranks, threads,
      statistics.median(t), min(t), pred, meas, ratio))
PY
done
echo "(predicted: $source)"
