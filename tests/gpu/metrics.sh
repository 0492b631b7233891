#!/usr/bin/env bash
# Metrics through the daemons on one device, started here on 127.0.0.1 (ports picked at run
# time); tests/gpu/device_check.sh runs it on cuda, and it runs on cpu as well. A 1-rank
# quickstart job on a worker with --metrics_listen; then the coordinator's and the worker's
# /metrics are scraped: the step counters must equal the job's steps, and the worker's step time
# split (compute, collective_wait, data) is printed per step.
# Usage: bash tests/gpu/metrics.sh BIN_DIR cuda|cpu LOGDIR   (BIN_DIR: a bazel-bin)
source "$(dirname "$0")/daemons.sh"

steps=50
sed -e 's/^mesh: .*/mesh: {shape: [1], dim_names: [dp]}/' \
    -e "s/^train: .*/train: {steps: $steps, seed: 1234}/" examples/quickstart.yaml >"$dir/job.yaml"
echo "device: $device" >>"$dir/job.yaml"
"$b/coordinator/weft-coordinator" --listen 127.0.0.1:0 --data_dir "$dir/db" \
  --port_file "$dir/port" --metrics_listen 127.0.0.1:0 --metrics_port_file "$dir/metrics.port" \
  >"$dir/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s "$dir/metrics.port" ]] && break; sleep 0.1; done
port=$(cat "$dir/port") metrics_port=$(cat "$dir/metrics.port") ||
  { echo "metrics: the coordinator did not start"; exit 1; }
OMP_WAIT_POLICY=passive "$b/worker/weft-worker" --coordinator "127.0.0.1:$port" \
  --device "$device_flag" --metrics_listen 127.0.0.1:0 >"$dir/worker.log" 2>&1 &
pids+=($!)
ctl() { "$b/client/weftctl" --coordinator "127.0.0.1:$port" "$@"; }
for _ in $(seq 300); do ctl workers | grep -q idle && break; sleep 0.1; done
ctl submit --watch "$dir/job.yaml" >"$dir/job.txt" 2>&1
worker_metrics=$(ctl workers --json | python3 -c '
import json, sys
print(json.load(sys.stdin)["workers"][0].get("metrics_address", ""))')
python3 - "$metrics_port" "$worker_metrics" "$steps" "$device" <<'PY'
import sys, urllib.request
coordinator_port, worker, steps, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def scrape(address):
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1])
            for l in text.splitlines() if l and not l.startswith("#")}
c = scrape(f"127.0.0.1:{coordinator_port}")
w = scrape(worker)
ok = c.get("weft_steps_total") == steps and w.get("weft_worker_steps_total") == steps
ok = ok and w.get('weft_worker_tasks_total{result="ok"}') == 1
phases = {p: w.get(f'weft_worker_step_phase_seconds_sum{{phase="{p}"}}', -1)
          for p in ("compute", "collective_wait", "data")}
total = w.get("weft_worker_step_seconds_sum", 0)
print(f"metrics ({device}): {int(c.get('weft_steps_total', -1))} steps counted by the coordinator, "
      f"{int(w.get('weft_worker_steps_total', -1))} by the worker (of {steps})")
print(f"  per step: {1e3 * total / steps:.3f} ms = " + ", ".join(
    f"{p} {1e3 * s / steps:.3f} ms" for p, s in phases.items()))
tasks_ok = int(w.get('weft_worker_tasks_total{result="ok"}', 0))
print(f"  allocator peak {int(w.get('weft_worker_allocator_peak_bytes', -1))} bytes; "
      f"tasks ok {tasks_ok}")
print(f"metrics ({device}): {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
