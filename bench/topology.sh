#!/usr/bin/env bash
# Topology-aware placement against registration order (issue 31), on hosts made of network
# namespaces: two hosts of two cpu workers each, the link between the hosts limited to
# TOPOLOGY_MBIT (100) Mbit/s each way by tc's token bucket (this kernel has no netem, so a rate,
# no delay), inside a host unlimited. The workers register by turns (a, b, a, b). A [dp, mp] MLP
# job (256 -> 1024 -> 256, Megatron column -> row over mp, global batch 8192 over dp, AdamW,
# TOPOLOGY_STEPS (12) steps) runs under `--placement topology` (each mp pair inside a host, dp
# across: 1 MiB of gradients per rank cross per step) and `--placement registration` (each mp pair
# across the hosts: 2 x 8 MiB of activations per rank per step), shaped and unshaped. Prints the
# median step (after 2 warm-up steps), each rank's host and the losses' agreement.
# Usage: bash bench/topology.sh   (as root, from the repository root). SKIP_BUILD=1 uses bazel-bin
#   as it is. It runs in a network namespace of its own (re-executing itself under unshare), so
#   the hosts, links and rules vanish with it; addresses 10.213.<h>.0/24 exist only there.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${WEFT_BENCH_NETNS:-}" ]]; then
  source bench/lib.sh
  if [[ -z "${SKIP_BUILD:-}" ]]; then
    bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker \
      >/dev/null 2>&1 || { echo "bazel build failed (run it to see why)" >&2; exit 1; }
  fi
  bench_header
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  exec unshare --net env WEFT_BENCH_NETNS=1 bash "$0" "$@"
fi
source bench/lib.sh
bench_workdir_with_daemons
mbit=${TOPOLOGY_MBIT:-100}
steps=${TOPOLOGY_STEPS:-12}
bin=$(readlink -f bazel-bin)

bench_netns_hosts 2
shape() { shape_links "$1"; }

write_random_npy "$tmp" 8192 256
cat > "$tmp/job.yaml" <<YAML
name: topology
mesh: {shape: [2, 2], dim_names: [dp, mp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 256, out_features: 1024, bias: false,
       placements: {weight: [Replicate(), Shard(1)]}}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 1024, out_features: 256, bias: false,
       placements: {weight: [Replicate(), Shard(0)]}}
  loss: mse
data: {source: npy, input: $tmp/inputs.npy, label: $tmp/labels.npy, batch_size: 8192,
       placements: [Shard(0), Replicate()]}
optimizer: {type: adamw, lr: 0.001, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: $steps, seed: 1}
YAML

# run PLACEMENT: a coordinator with --placement PLACEMENT and the four workers, the job once;
# prints "median_s hosts_by_rank" and leaves the step events in $tmp/PLACEMENT.$mbit.json.
run() {
  local placement=$1 port w h coordinator out="$tmp/$1.$mbit"
  rm -f "$tmp/port"
  "$bin/coordinator/weft-coordinator" --listen 0.0.0.0:0 --data_dir "$tmp/db-$placement-$mbit" \
    --port_file "$tmp/port" --placement "$placement" > "$out.coordinator.log" 2>&1 &
  coordinator=$!
  local started=("$coordinator")
  wait_for_file "$tmp/port" 30
  port=$(cat "$tmp/port")
  local ctl=("$bin/client/weftctl" --coordinator "127.0.0.1:$port")
  for w in 0 1 2 3; do
    h=$((w % 2 + 1))
    in_host "$h" "$bin/worker/weft-worker" \
      --coordinator "10.213.$h.1:$port" --host "10.213.$h.2" > "$out.worker$w.log" 2>&1 &
    started+=("$!")
    until (($("${ctl[@]}" workers | grep -c worker-) == w + 1)); do sleep 0.05; done
  done
  "${ctl[@]}" submit "$tmp/job.yaml" --watch --json > "$out.json"
  local id
  id=$(/usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
  if l.startswith("{"):
    e=json.loads(l)
    if e.get("type")=="submitted": print(e["job_id"]); break' "$out.json")
  "${ctl[@]}" get "$id" | sed -n 's/^workers: *//p' > "$out.workers"
  kill "${started[@]}" 2>/dev/null || true
  wait "${started[@]}" 2>/dev/null || true
  echo "$(median_seconds 2 < "$out.json") $(cat "$out.workers")"
}

echo "job: MLP 256 -> 1024 -> 256 on [dp 2, mp 2], batch 8192, $steps steps; 2 hosts x 2 workers"
for m in "$mbit" 0; do
  mbit=$m
  shape "$m"
  for placement in topology registration; do
    result=$(run "$placement")
    echo "link $( ((m > 0)) && echo "$m Mbit/s" || echo unshaped)  --placement $placement: median step ${result%% *} s"
    echo "    ${result#* }"
  done
done
/usr/bin/python3 - "$tmp" <<'PY'
import glob, json, sys
runs = {}
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    runs[path.rsplit("/", 1)[1]] = [json.loads(l)["loss"] for l in open(path)
                                     if l.startswith('{"type":"step"')]
first = next(iter(runs.values()))
worst = max(abs(a - b) / abs(b) for r in runs.values() for a, b in zip(r, first))
print("losses: %d runs of %d steps, largest relative difference from the first %.2e"
      % (len(runs), len(first), worst))
PY
