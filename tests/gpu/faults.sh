#!/usr/bin/env bash
# Restart and cancel through the daemons on one device, started here on 127.0.0.1 (the port
# picked at run time); tests/gpu/device_check.sh runs it on cuda, and it runs on cpu as well:
#  - restart: a 1-rank job with a checkpoint every 2 steps and train.max_restarts 1, whose worker
#    is killed (SIGKILL through WEFT_DEBUG_CRASH_AT=worker_after_shard@6) after writing step 6's
#    shard; a replacement worker takes the job from step 4's checkpoint to SUCCEEDED, and every
#    step's loss must equal an uninterrupted run's bit for bit;
#  - cancel: a long job cancelled while it runs: its worker must be idle again within 5 s.
# Prints a line per check; exits non-zero if one fails. Logs in LOGDIR.
# Usage: bash tests/gpu/faults.sh BIN_DIR cuda|cpu LOGDIR   (BIN_DIR: a bazel-bin)
source "$(dirname "$0")/daemons.sh"
failed=0

sed -e 's/^mesh: .*/mesh: {shape: [1], dim_names: [dp]}/' \
    -e 's/^train: .*/train: {steps: 20, seed: 1234, max_restarts: 1}/' \
    examples/quickstart.yaml >"$dir/plain.yaml"
echo "device: $device" >>"$dir/plain.yaml"
{ cat "$dir/plain.yaml"; echo "checkpoint: {dir: ckpt, every: 2, keep: 10}"; } >"$dir/restart.yaml"
sed -e 's/^train: .*/train: {steps: 1000000, seed: 1234}/' "$dir/plain.yaml" >"$dir/long.yaml"

"$b/coordinator/weft-coordinator" --listen 127.0.0.1:0 --data_dir "$dir/db" \
  --port_file "$dir/port" --data_root "$dir" --checkpoint_root "$dir" \
  >"$dir/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
port=$(cat "$dir/port") || { echo "faults: the coordinator did not start"; exit 1; }

ctl() { "$b/client/weftctl" --coordinator "127.0.0.1:$port" "$@"; }
start_worker() {  # LOG [ENV=VALUE...]: a worker on the device; its pid in $worker
  local log=$1
  shift
  env "$@" OMP_WAIT_POLICY=passive "$b/worker/weft-worker" --coordinator "127.0.0.1:$port" \
    --device "$device_flag" --data_root "$dir" --checkpoint_root "$dir" >"$dir/$log" 2>&1 &
  worker=$!
  pids+=("$worker")
}
state_of() { ctl get --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("state",""))'; }
wait_state() {  # JOB STATE...: polls until the job is in one of the states (120 s); sets $state
  local job=$1
  shift
  for _ in $(seq 1200); do
    state=$(state_of "$job")
    for s in "$@"; do [[ "$state" == "$s" ]] && return 0; done
    sleep 0.1
  done
  return 1
}
losses() {  # JOB: "step loss" per step of its record
  ctl get --json "$1" | python3 -c '
import json, sys
for s in json.load(sys.stdin).get("steps", []): print(s["step"], repr(s["loss"]))'
}

# Restart.
start_worker plain.log
plain_worker=$worker
id=$(ctl submit "$dir/plain.yaml")
wait_state "$id" SUCCEEDED FAILED
losses "$id" >"$dir/plain.txt"
echo "uninterrupted run: $id $state, $(wc -l <"$dir/plain.txt") steps"
kill "$plain_worker"
wait "$plain_worker" 2>/dev/null

start_worker crash.log WEFT_DEBUG_CRASH_AT=worker_after_shard@6
crashing=$worker
id=$(ctl submit "$dir/restart.yaml")
wait "$crashing" 2>/dev/null
echo "worker killed at its crash point: exit status $?"
start_worker replacement.log
wait_state "$id" SUCCEEDED FAILED
losses "$id" >"$dir/restart.txt"
echo "restarted run: $id $state, attempt $(ctl get --json "$id" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("attempt",0))')"
python3 - "$dir/plain.txt" "$dir/restart.txt" <<'PY' || failed=1
import sys
a = dict(l.split() for l in open(sys.argv[1]))
b = dict(l.split() for l in open(sys.argv[2]))
common = [k for k in b if k in a]
diff = max((abs(float(a[k]) - float(b[k])) for k in common), default=None)
same = sum(1 for k in common if a[k] == b[k])
ok = len(a) == 20 and len(b) == 20 and same == 20
print(f"restart: {len(b)} steps against {len(a)} uninterrupted, {same} identical, max diff {diff}:",
      "ok" if ok else "BAD")
sys.exit(0 if ok else 1)
PY
[[ "$state" == SUCCEEDED ]] || failed=1

# Cancel.
id=$(ctl submit "$dir/long.yaml")
wait_state "$id" RUNNING
for _ in $(seq 600); do
  [[ $(ctl get --json "$id" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("steps",[])))') -gt 0 ]] && break
  sleep 0.1
done
t0=$(date +%s%N)
ctl cancel "$id" >/dev/null
for _ in $(seq 200); do
  ctl workers --json | python3 -c 'import json,sys; sys.exit(0 if any(w.get("state")=="idle" for w in json.load(sys.stdin).get("workers",[])) else 1)' && break
  sleep 0.05
done
freed_ms=$((($(date +%s%N) - t0) / 1000000))
wait_state "$id" CANCELLED
echo "cancel: $state, the worker idle $freed_ms ms after the cancel: $([[ "$state" == CANCELLED && $freed_ms -le 5000 ]] && echo ok || echo BAD)"
[[ "$state" == CANCELLED && $freed_ms -le 5000 ]] || failed=1

echo "faults ($device): $([[ $failed -eq 0 ]] && echo PASS || echo FAIL)"
exit $failed
