#!/usr/bin/env bash
# What overlapping collectives with compute buys data parallelism. For the seed's MLP
# (bench/mlp_step.yaml: 1024 -> 4096 -> 1024, global batch 512, AdamW) and the GPT-2 of
# bench/gpt_step.sh (n_embd 512, 8 heads, 4 layers, vocab 8192, T 256, global batch 8): the
# dp=2 step's overhead over one rank doing the same per-rank work (1 rank at half the global
# batch), with `overlap: false` (every collective blocking where the graph puts it) and with the
# default overlap (collectives started early, on the communicators' threads), the three runs
# alternating in rounds. Each rank gets nproc/2 threads, the 1-rank run too. Then one traced dp2
# run per model: the share of the collectives' time (the trace's second row) during which the
# executor computed rather than waited, and the executor's waits per step.
# Usage: bash bench/overlap_step.sh   (from the repository root)
#   OVERLAP_ROUNDS (default 3) rounds of OVERLAP_STEPS (default 8) steps, the first 3 dropped.
#   OPENBLAS_CORETYPE (e.g. SkylakeX) is passed on, as in bench/gpt_step.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --bench >/dev/null
bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker >/dev/null 2>&1
rounds=${OVERLAP_ROUNDS:-3}
steps=${OVERLAP_STEPS:-8}
threads=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
export OPENBLAS_NUM_THREADS=$threads
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source bench/lib.sh

bench_header
echo "threads per rank: $threads; $rounds rounds of $steps steps (median of steps 4-$steps)"
echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset (OpenBLAS detects the core)}"
echo

write_random_npy "$tmp" 2048 1024
write_gpt_tokens "$tmp/tokens.bin"

# spec MODEL NAME RANKS GLOBAL_BATCH OVERLAP
spec() {
  local file="$tmp/$1_$2.yaml" placements="" sharded=""
  if [ "$3" -gt 1 ]; then placements=", placements: [Shard(0)]"; sharded="\n  placements: [Shard(0)]"; fi
  if [ "$1" = mlp ]; then
    sed -e "s/shape: \[1\]/shape: [$3]/" -e "s/  batch_size: 512/  batch_size: $4$sharded/" \
        -e "s/steps: 35/steps: $steps/" -e "s|input: inputs.npy|input: $tmp/inputs.npy|" \
        -e "s|label: labels.npy|label: $tmp/labels.npy|" bench/mlp_step.yaml > "$file"
  else
    gpt2_bench_spec overlap_gpt2 "{shape: [$3], dim_names: [dp]}" "$tmp/tokens.bin" "$4" \
      "$steps" "$placements" > "$file"
  fi
  echo "overlap: $5" >> "$file"
  echo "$file"
}

# The median step of a `weftctl local --json` run (steps after the third).
median() { median_seconds 3; }

fmt='%-5s %11s %11s %11s %10s %10s %7s %10s %9s\n'
printf "$fmt" model "1 rank s" "dp2 block s" "dp2 ovl s" "ovh block" "ovh ovl" hidden \
  "coll busy" "waits/st"
for model in mlp gpt2; do
  batch=512; [ "$model" = gpt2 ] && batch=8
  one=$(spec "$model" one 1 $((batch / 2)) true)
  blocking=$(spec "$model" blocking 2 "$batch" false)
  overlapped=$(spec "$model" overlapped 2 "$batch" true)
  : > "$tmp/$model.rounds"
  for round in $(seq "$rounds"); do
    a=$(bazel-bin/client/weftctl local --ranks 1 --json "$one" 2>/dev/null | median)
    b=$(bazel-bin/client/weftctl local --ranks 2 --json "$blocking" 2>/dev/null | median)
    c=$(bazel-bin/client/weftctl local --ranks 2 --json "$overlapped" 2>/dev/null | median)
    echo "$a $b $c" >> "$tmp/$model.rounds"
  done
  bazel-bin/client/weftctl local --ranks 2 --trace "$tmp/$model.trace.json" "$overlapped" \
    > /dev/null 2>&1
  python3 - "$tmp/$model.rounds" "$tmp/$model.trace.json" "$model" "$fmt" "$steps" <<'PY'
import json, statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if "-" not in l.split()]
one, block, ovl = (statistics.median(c) for c in zip(*rows))
events = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e["ph"] == "X"]
# Per rank: collective time on lane 1, and how much of it lane 0 spent computing (not waiting).
busy = total = 0.0
waits = 0
for pid in {e["pid"] for e in events}:
    compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                     if e["pid"] == pid and e["tid"] == 0 and e["cat"] != "wait")
    waits += sum(1 for e in events if e["pid"] == pid and e["cat"] == "wait")
    for c in (e for e in events if e["pid"] == pid and e["tid"] == 1):
        lo, hi = c["ts"], c["ts"] + c["dur"]
        total += hi - lo
        busy += sum(max(0, min(hi, b) - max(lo, a)) for a, b in compute)
ranks = len({e["pid"] for e in events})
ob, oo = block - one, ovl - one
hidden = "%.0f%%" % (100 * (1 - oo / ob)) if ob > 0 else "-"
sys.stdout.write(sys.argv[4].replace("\\n", "\n") % (
    sys.argv[3], "%.3f" % one, "%.3f" % block, "%.3f" % ovl, "%+.3f" % ob, "%+.3f" % oo, hidden,
    "%.0f%%" % (100 * busy / total) if total else "-",
    "%.1f" % (waits / ranks / int(sys.argv[5]))))
PY
done
echo
echo "1 rank s: median step of 1 rank at half the global batch (the per-rank work of dp2);"
echo "dp2 block s / dp2 ovl s: dp2 with overlap: false / true (medians over the rounds);"
echo "ovh: dp2 minus 1 rank; hidden: 1 - ovh ovl / ovh block; coll busy: of the traced dp2 run's"
echo "collective time (trace row 2), the share during which the executor computed; waits/st:"
echo "the executor's waits for collectives per rank per step"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
