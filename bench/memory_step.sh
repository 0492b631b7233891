#!/usr/bin/env bash
# Memory per rank under ZeRO and recompute, planned and measured, and what recompute costs in
# step time. Two models on dp = 4: the seed's MLP (examples/quickstart.yaml: 1024 -> 4096 -> 1024,
# no biases, AdamW, global batch 32) and the GPT-2 of bench/gpt_step.sh (n_embd 512, 8 heads,
# 4 layers, vocab 8192, T 256, AdamW, global batch 8). Rows: plain DP, ZeRO levels 1-3, full and
# selective recompute, level 3 with full recompute, bf16 storage alone and with ZeRO levels 1-3.
# Planned: `weftctl plan --json`, rank 0;
# measured: the largest `peak_bytes` of the step events of `weftctl local --json` (the most any
# rank's allocator held in a step). Next to them, the ZeRO paper's model states per rank for
# Adam in float32 (P parameters, G = P gradients, 2P states; over N = 4 where the level shards),
# and for bf16 storage its mixed-precision formula (2 + 2 + K bytes a parameter, K = 12: the
# float32 master weight and Adam's two moments).
# Then GPT-2 on one rank with and without recompute, and with bf16 storage, alternating in
# rounds: the median step.
# Usage: bash bench/memory_step.sh   (from the repository root)
#   RECOMPUTE_ROUNDS (default 3) rounds of RECOMPUTE_STEPS (default 8) steps, the first 3 dropped;
#   MEMORY_TABLE=0 skips the memory table (the step times only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --bench >/dev/null
bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker >/dev/null 2>&1
rounds=${RECOMPUTE_ROUNDS:-3}
steps=${RECOMPUTE_STEPS:-8}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source bench/lib.sh

bench_header
echo
write_gpt_tokens "$tmp/tokens.bin"

# spec MODEL ROW [STEPS]: the spec file of one table row.
spec() {
  local file="$tmp/$1_$2.yaml" recompute="" sharding="" storage=""
  case "$2" in
    bf16) storage="storage: bf16" ;;
    bf16_zero*) storage="storage: bf16"; sharding="sharding: {dim: dp, level: ${2#bf16_zero}}" ;;
    zero1|zero2|zero3) sharding="sharding: {dim: dp, level: ${2#zero}}" ;;
    full|selective) recompute="$2" ;;
    zero3_full) sharding="sharding: {dim: dp, level: 3}"; recompute=full ;;
  esac
  if [ "$1" = mlp ]; then
    sed -e "s/steps: 10/steps: ${3:-2}/" examples/quickstart.yaml > "$file"
    [ -n "$recompute" ] && sed -i "s/^  layers:/  recompute: $recompute\n  layers:/" "$file"
  else
    gpt2_bench_spec "mem_$2" "{shape: [${4:-4}], dim_names: [dp]}" "$tmp/tokens.bin" 8 \
      "${3:-2}" "$([ "${4:-4}" -gt 1 ] && echo ', placements: {dp: Shard(0)}')" > "$file"
    [ -n "$recompute" ] && sed -i "s/^  arch: gpt2/  arch: gpt2\n  recompute: $recompute/" "$file"
  fi
  [ -n "$sharding" ] && echo "$sharding" >> "$file"
  [ -n "$storage" ] && echo "$storage" >> "$file"
  echo "$file"
}

fmt='%-5s %-11s %9s %9s %9s %9s %10s %10s %7s %9s\n'
[ "${MEMORY_TABLE:-1}" = 1 ] && printf "$fmt" model row "params" "grads" "states" "peak act" "planned" "measured" "m/p" "paper"
for model in $([ "${MEMORY_TABLE:-1}" = 1 ] && echo mlp gpt2); do
  for row in dp zero1 zero2 zero3 full selective zero3_full bf16 bf16_zero1 bf16_zero2 bf16_zero3; do
    [ "$model" = mlp ] && [ "$row" = selective ] && continue
    file=$(spec "$model" "$row")
    bazel-bin/client/weftctl plan --json "$file" > "$tmp/plan.json"
    bazel-bin/client/weftctl local --ranks 4 --json "$file" 2>/dev/null > "$tmp/run.json"
    python3 - "$tmp/plan.json" "$tmp/run.json" "$model" "$row" "$fmt" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
m = plan["ranks"][0]["memory"]
steps = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"type":"step"')]
measured = max(s.get("peak_bytes", 0) for s in steps) if steps else 0
model, row, fmt = sys.argv[3], sys.argv[4], sys.argv[5].replace("\\n", "")
MiB = 1 << 20
# The whole model's parameters in bytes: rank 0's, times 4 where level 3 shards them.
p = m["param_bytes"] * (4 if "zero3" in row else 1)
level = int(row[row.index("zero") + 4]) if "zero" in row else 0
if row.startswith("bf16"):
    n = p / 2  # parameters; 2 + 2 + 12 bytes each
    paper = {0: 16 * n, 1: 4 * n + 12 * n / 4, 2: 2 * n + 14 * n / 4, 3: 16 * n / 4}[level]
else:
    paper = {0: p + p + 2 * p, 1: p + p + 2 * p / 4, 2: p + (p + 2 * p) / 4, 3: (4 * p) / 4}[level]
f = lambda b: "%.1f" % (b / MiB)
print(fmt % (model, row, f(m["param_bytes"]), f(m["grad_bytes"]), f(m["optimizer_state_bytes"]),
             f(m["peak_activation_bytes"]), f(m["peak_bytes"]), f(measured),
             "%.3f" % (measured / m["peak_bytes"]) if m["peak_bytes"] else "-", f(paper)))
PY
  done
done
if [ "${MEMORY_TABLE:-1}" = 1 ]; then
  echo "(MiB per rank; params, grads, states: the plan's buffers of each role; peak act: activations,"
  echo " data and loss alive at once; paper: P + G + 2P with the sharded terms over 4; for bf16"
  echo " storage 2 + 2 + 12 bytes a parameter, the master weight counted with the states)"
  echo
fi

echo "GPT-2 on 1 rank (global batch 8), $rounds rounds of $steps steps, median of steps 4-$steps:"
: > "$tmp/rounds"
for round in $(seq "$rounds"); do
  line=""
  for row in dp full selective bf16; do
    file=$(spec gpt2 "$row" "$steps" 1)
    t=$(bazel-bin/client/weftctl local --ranks 1 --json "$file" 2>/dev/null | median_seconds 3)
    line="$line $t"
  done
  echo "$line" >> "$tmp/rounds"
done
python3 - "$tmp/rounds" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if "-" not in l.split()]
none, full, selective, bf16 = (statistics.median(c) for c in zip(*rows))
print("%-20s %8s %8s" % ("variant", "step s", "extra"))
for name, t in (("none", none), ("recompute full", full), ("recompute selective", selective),
                ("bf16 storage", bf16)):
    print("%-20s %8.3f %+7.1f%%" % (name, t, 100 * (t / none - 1)))
PY
