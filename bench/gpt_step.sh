#!/usr/bin/env bash
# Training tokens/s of a mid-size GPT-2 (n_embd 512, 8 heads, 4 layers, vocab 8192, T=256, B=8,
# dropout 0, AdamW, float32; 16.9 M parameters) through the real daemons (`weftctl local --json`)
# on 1 rank, dp=2 (batch Shard(0)) and mp=2 (`parallelize: {mp: {dim: mp, plan: megatron}}`),
# next to Debian's PyTorch running the same model (bench/gpt_step_torch.py): one process, DDP
# over gloo, and a Megatron-style TP over gloo (vocabulary-parallel embedding, head and
# cross-entropy, as Weft's plan), all on 127.0.0.1. Every run uses all cores: 1 rank gets
# `nproc` threads, each of 2 ranks nproc/2 (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and torch's
# intra-op threads alike). Both sides read the same llm.c token file (random ids, fixed seed).
# Usage: bash bench/gpt_step.sh   (from the repository root; installs python3-torch if missing)
#   GPT_WARMUP (default 3) steps are dropped, GPT_STEPS (default 10) are measured, in each of
#   GPT_ROUNDS (default 3) rounds that run Weft then PyTorch, so that both see the machine's
#   slow spells (a shared VM's throughput drifts by 10-20% over minutes).
#   OPENBLAS_CORETYPE (e.g. SkylakeX) is passed to both sides: OpenBLAS 0.3.21 does not know
#   newer Xeons (family 6 model 207) and falls back to its generic Prescott (SSE3) sgemm kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --bench >/dev/null
bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker >/dev/null 2>&1
cores=$(nproc)
warmup=${GPT_WARMUP:-3}
steps=${GPT_STEPS:-10}
rounds=${GPT_ROUNDS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
losses=""

source bench/lib.sh

bench_header
echo "model: gpt2 n_embd 512, n_head 8, n_layer 4, vocab 8192, T 256, B 8, dropout 0, AdamW,"
echo "float32; median of steps $((warmup + 1))-$((warmup + steps)); tokens/s = B*T / median step"
echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset (OpenBLAS detects the core)}"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

write_gpt_tokens "$tmp/tokens.bin"

spec() {  # name mesh-line data-extra [parallelize-line]
  { gpt2_bench_spec "gpt_step_$1" "$2" "$tmp/tokens.bin" 8 $((warmup + steps)) "$3"
    echo "${4:-}"; } > "$tmp/$1.yaml"
}
spec 1rank "{shape: [1], dim_names: [dp]}" ""
spec dp2 "{shape: [2], dim_names: [dp]}" ", placements: {dp: Shard(0)}"
spec mp2 "{shape: [2], dim_names: [mp]}" "" "parallelize: {mp: {dim: mp, plan: megatron}}"

fmt='%-6s %5s %7s %8s %10s %9s %8s %11s %10s %11s %10s\n'
printf "$fmt" run ranks threads "weft s" "weft tok/s" "weft MiB" "torch s" "torch tok/s" \
  "weft/torch" "round ratios" "other"
for run in 1rank:1:single dp2:2:ddp mp2:2:tp; do
  IFS=: read -r name ranks mode <<<"$run"
  threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
  export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
  # Rounds alternate the two frameworks, so that a slow spell of the machine falls on both.
  : > "$tmp/$name.rounds"
  for round in $(seq "$rounds"); do
    if python3 bench/pipeline_bubble.py run "$tmp/$name.$round.cpu.json" bazel-bin/client/weftctl \
        local --ranks "$ranks" --json "$tmp/$name.yaml" > "$tmp/$name.jsonl" 2> "$tmp/$name.err"; then
      weft=$(python3 - "$tmp/$name.jsonl" "$warmup" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"type":"step"')]
t = [s["step_seconds"] for s in steps[int(sys.argv[2]):]]
print("%.4f %.1f %.4f" % (statistics.median(t), steps[-1]["bytes_sent"] / 2**20, steps[0]["loss"]))
PY
)
    else
      weft="- - -"
      echo "$name: weftctl local failed: $(grep -v '^{' "$tmp/$name.err" | tail -2) $(tail -1 "$tmp/$name.jsonl")"
    fi
    torch=$(python3 bench/pipeline_bubble.py run "$tmp/$name.$round.torch.cpu.json" \
        /usr/bin/python3 bench/gpt_step_torch.py "$mode" "$tmp/tokens.bin" "$threads" "$steps" \
        "$warmup" 2> "$tmp/$name.torch.err" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
print("%.4f %.4f" % (d["median_step_seconds"], d["first_loss"]))') ||
      { torch="- -"; echo "$name: pytorch failed: $(tail -2 "$tmp/$name.torch.err")"; }
    other=$(python3 bench/pipeline_bubble.py other "$tmp/$name.$round.cpu.json" 2>/dev/null || echo -)
    other+=/$(python3 bench/pipeline_bubble.py other "$tmp/$name.$round.torch.cpu.json" 2>/dev/null || echo -)
    echo "$weft $torch $other" >> "$tmp/$name.rounds"
  done
  # Per framework, the median over rounds of each round's median step; the ratio is the median of
  # the rounds' ratios (each from two adjacent runs).
  row=$(python3 - "$tmp/$name.rounds" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if "-" not in l.split()[:5]]
if not rows:
    print("- - - - - - - - -"); sys.exit()
w = [float(r[0]) for r in rows]; t = [float(r[3]) for r in rows]
ratios = sorted(a / b for a, b in zip(w, t))
wm, tm = statistics.median(w), statistics.median(t)
print("%.3f %.0f %s %.3f %.0f %.2f %s %s %s %s" % (
    wm, 2048 / wm, rows[0][1], tm, 2048 / tm, statistics.median(ratios),
    "/".join("%.2f" % r for r in ratios), rows[-1][5], rows[0][2], rows[0][4]))
PY
)
  read -r wsec wtok wmib tsec ttok ratio rr other wloss tloss <<<"$row"
  printf "$fmt" "$name" "$ranks" "$threads" "$wsec" "$wtok" "$wmib" "$tsec" "$ttok" "$ratio" "$rr" "$other"
  losses+="  $name first-step loss: weft $wloss, pytorch $tloss"$'\n'
done
echo
echo "weft s, torch s: median step seconds (slowest rank), the median over $rounds rounds that"
echo "alternate the two; weft MiB: bytes the Gloo communicators sent per step, all ranks;"
echo "weft/torch: the median of the rounds' step time ratios (goal <= 0.9), round ratios: each"
echo "round's, sorted; other: cores that other processes used during the last round's weft /"
echo "pytorch run (bench/pipeline_bubble.py run)"
printf '%s' "$losses"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
