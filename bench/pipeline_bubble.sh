#!/usr/bin/env bash
# Pipeline bubble and activation memory (issue 4). A pipeline whose stages have equal compute
# (bench/pipeline_bubble.yaml: eight 512 x 512 linear layers, no bias, relu between, global batch
# 1024, AdamW, npy data) runs through the real daemons (`weftctl local --json --trace FILE`) on
# pp=2 and pp=4 with FThenB and 1F1B at m = 4 and 8 micro-batches and VPP (virtual_stages 2) at
# m = 4 and 8. From each trace bench/pipeline_bubble.py computes per rank the idle fraction
# (first STEPS_SKIP steps dropped) and prints it next to the theoretical bubble, (p-1)/(m+p-1)
# for FThenB and 1F1B and ((p-1)/v)/(m+(p-1)/v) for VPP, and the peak activation memory of each
# rank as the planner reports it (`weftctl plan --json`: ranks[].memory.peak_activation_bytes).
# One OpenBLAS thread per rank: pp=2 is one rank per core on a 2-core machine; pp=4 puts two
# ranks on each core.
# Usage: bash bench/pipeline_bubble.sh   (from the repository root)
#   STEPS=22 STEPS_SKIP=2 PPS="2 4" KEEP=DIR (keep the traces, specs and plans in DIR)
#   SKIP_BUILD=1 (run the binaries already in bazel-bin)
#   MAX_OTHER=0.1 TRIES=3: repeat a run (up to TRIES in all) while other processes used more than
#   MAX_OTHER cores during it; the `other` column says how much they used in the run kept.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup
steps=${STEPS:-22}
skip=${STEPS_SKIP:-2}
batch=1024
bench_workdir
analyze() { /usr/bin/python3 bench/pipeline_bubble.py "$@"; }

bench_header "${SKIP_BUILD:+(binaries not rebuilt)}"
echo "model: 8 x linear 512x512 (no bias, relu between), global batch $batch, MSE, AdamW, npy data;"
echo "1 OpenBLAS thread per rank; $steps steps, the first $skip dropped"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
write_random_npy "$tmp" $(( 4 * batch )) 512

spec() {  # pp schedule m v batch -> a spec next to the npy files
  local f="$tmp/pp$1_$2_m$3_v$4_b$5.yaml"
  sed -e "s/shape: \[2\]/shape: [$1]/" -e "s/schedule: 1F1B/schedule: $2/" \
      -e "s/micro_batches: 4/micro_batches: $3/" -e "s/virtual_stages: 1/virtual_stages: $4/" \
      -e "s/batch_size: 1024/batch_size: $5/" -e "s/steps: 12/steps: $steps/" \
      bench/pipeline_bubble.yaml > "$f"
  echo "$f"
}

# Runs NAME on PP ranks with SPEC; the trace, step lines and the CPU the rest of the machine used
# meanwhile land in $tmp/NAME.*. On a shared machine a run during which other processes used more
# than MAX_OTHER cores is repeated, up to TRIES times in all (the last one is kept).
measure() {
  local try
  for (( try = 1; try <= ${TRIES:-3}; try++ )); do
    analyze run "$tmp/$1.cpu.json" env OPENBLAS_NUM_THREADS=1 bazel-bin/client/weftctl local \
        --ranks "$2" --json --trace "$tmp/$1.trace.json" "$3" > "$tmp/$1.jsonl" 2> "$tmp/$1.log" ||
      return 1
    /usr/bin/python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["other_cores"] > float(sys.argv[2]))' \
        "$tmp/$1.cpu.json" "${MAX_OTHER:-0.1}" && return 0
  done
  return 0
}

analyze header
for pp in ${PPS:-2 4}; do
  for run in FThenB:4:1 FThenB:8:1 1F1B:4:1 1F1B:8:1 VPP:4:2 VPP:8:2; do
    IFS=: read -r sched m v <<<"$run"
    name="pp${pp}_${sched}_m${m}_v${v}"
    s=$(spec "$pp" "$sched" "$m" "$v" "$batch")
    # The same stages running FThenB over 1 and 2 micro-batches of the same size: the unit of
    # the ~mb column (what one more micro-batch keeps alive).
    ref1=$(spec "$pp" FThenB 1 1 $(( batch / m )))
    ref2=$(spec "$pp" FThenB 2 1 $(( 2 * batch / m )))
    bazel-bin/client/weftctl plan --json "$s" > "$tmp/$name.plan.json"
    bazel-bin/client/weftctl plan --json "$ref1" > "$tmp/$name.ref1.json"
    bazel-bin/client/weftctl plan --json "$ref2" > "$tmp/$name.ref2.json"
    if ! measure "$name" "$pp" "$s"; then
      echo "$name: weftctl local failed:"; tail -3 "$tmp/$name.jsonl" "$tmp/$name.log"; continue
    fi
    analyze row "$sched" "$pp" "$m" "$v" "$tmp/$name.trace.json" "$tmp/$name.jsonl" \
      "$tmp/$name.plan.json" "$tmp/$name.ref1.json" "$tmp/$name.ref2.json" "$tmp/$name.cpu.json" \
      "$skip"
  done
done
# The cost of a send/recv with (almost) nothing to compute: the same pipeline with a global batch
# of 16 (2 rows per micro-batch, 4 KiB messages).
echo
for pp in ${PPS:-2 4}; do
  s=$(spec "$pp" 1F1B 8 1 16)
  if measure "floor$pp" "$pp" "$s"; then
    analyze p2p "p2p floor, pp=$pp 1F1B m=8, batch 16" "$tmp/floor$pp.trace.json" \
      "$tmp/floor$pp.jsonl" "$skip"
    echo "  (other processes: $(analyze other "$tmp/floor$pp.cpu.json") cores)"
  else
    echo "p2p floor pp=$pp: weftctl local failed"; tail -3 "$tmp/floor$pp.log"
  fi
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
