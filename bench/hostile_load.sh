#!/usr/bin/env bash
# A job trains through a connection flood (issue 30): a coordinator (with its metrics server) and
# one cpu worker on 127.0.0.1 run an MLP job (1024 -> 4096 -> relu -> 1024, batch 256, AdamW,
# HOSTILE_STEPS (150) steps of about 0.12 s here) three times: unloaded, flooded, unloaded again.
# In the flooded run bench/hostile_load.py opens, from the job's 5th step until it ends, all at
# once: HOSTILE_IDLE (5,000) TCP connections to the gRPC port that never send a byte,
# HOSTILE_REFLECTION (2,000) server-reflection streams over 100 channels that ask list_services
# once and never close, and HOSTILE_SLOW_HTTP (1,000) GET /metrics requests that send one more
# header byte every 2-4 s and never end. In every run it times `weftctl list`, `weftctl submit`
# (a 1-step job) and a metrics scrape 5 times each from the 5th step, and samples the
# coordinator's RSS, threads and CPU. Prints the step times, the latencies, what the flood got
# and what the coordinator spent.
# Usage: bash bench/hostile_load.sh   (from the repository root; about a minute after the build)
#   SKIP_BUILD=1 uses bazel-bin as it is; KEEP=DIR keeps the daemons' logs and the runs' JSON.
#   The client raises its open-file soft limit to the hard one; below what the flood needs it
#   scales the idle and slow connections down and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
if [[ -z "${SKIP_BUILD:-}" ]]; then
  bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker \
    >/dev/null 2>&1 || { echo "bazel build failed (run it to see why; SKIP_BUILD=1 uses" \
    "bazel-bin as it is)" >&2; exit 1; }
fi
steps=${HOSTILE_STEPS:-150}
py=/usr/bin/python3
weftctl=bazel-bin/client/weftctl

bench_workdir_with_daemons

bench_header
echo "job: MLP 1024 -> 4096 -> relu -> 1024, batch 256, AdamW, $steps steps, 1 cpu worker"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

write_random_npy "$tmp" 2048 1024
sed -e "s#input: inputs.npy#input: $tmp/inputs.npy#; s#label: labels.npy#label: $tmp/labels.npy#" \
    -e "s/batch_size: 512/batch_size: 256/; s/steps: 35/steps: $steps/" \
    -e "s/name: bench-mlp/name: hostile-load/" \
    bench/mlp_step.yaml > "$tmp/job.yaml"
cat > "$tmp/tiny.yaml" <<EOF
name: hostile-load-submit
mesh: {shape: [1], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 1024, out_features: 8, bias: false}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 8, out_features: 1024, bias: false}
  loss: mse
data: {source: npy, input: $tmp/inputs.npy, label: $tmp/labels.npy, batch_size: 8}
optimizer: {type: adamw, lr: 0.001, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: 1, seed: 1}
EOF

bazel-bin/coordinator/weft-coordinator --listen 127.0.0.1:0 --data_dir "$tmp/db" \
  --port_file "$tmp/grpc.port" --metrics_listen 127.0.0.1:0 \
  --metrics_port_file "$tmp/metrics.port" \
  > "$tmp/coordinator.log" 2>&1 &
coordinator=$!
pids+=("$coordinator")
wait_for_file "$tmp/grpc.port" 30
wait_for_file "$tmp/metrics.port" 30
grpc_port=$(cat "$tmp/grpc.port")
metrics_port=$(cat "$tmp/metrics.port")
bazel-bin/worker/weft-worker --coordinator "127.0.0.1:$grpc_port" > "$tmp/worker.log" 2>&1 &
worker=$!
pids+=("$worker")
ctl=("$weftctl" --coordinator "127.0.0.1:$grpc_port")
deadline=$((SECONDS + 30))
until "${ctl[@]}" workers | grep -q worker-; do
  ((SECONDS < deadline)) || { echo "the worker did not register; logs in $tmp" >&2; exit 1; }
  sleep 0.1
done

# run NAME [--flood]: the job, with the client of hostile_load.py beside it; $tmp/NAME.json.
run() {
  local name=$1 watch
  shift
  "${ctl[@]}" submit "$tmp/job.yaml" --watch --json 2> "$tmp/$name.watch.err" |
    $py bench/hostile_load.py stamp > "$tmp/$name.events" &
  watch=$!
  $py bench/hostile_load.py --weftctl "$weftctl" --grpc_port "$grpc_port" \
    --metrics_port "$metrics_port" --coordinator_pid "$coordinator" --worker_pid "$worker" \
    --events "$tmp/$name.events" --tiny_spec "$tmp/tiny.yaml" \
    --idle "${HOSTILE_IDLE:-5000}" --reflection "${HOSTILE_REFLECTION:-2000}" \
    --slow_http "${HOSTILE_SLOW_HTTP:-1000}" "$@" > "$tmp/$name.json" 2> "$tmp/$name.err" ||
    { echo "$name: hostile_load.py failed: $(tail -3 "$tmp/$name.err")" >&2; exit 1; }
  wait "$watch"
}
run unloaded
run flooded --flood
run unloaded_after

$py - "$tmp/unloaded.json" "$tmp/flooded.json" "$tmp/unloaded_after.json" <<'PY'
import json, statistics, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
u, f, a = runs

def steps(run, lo, hi=None):
    return [s[1] for s in run["steps"] if s[0] >= lo and (hi is None or s[0] <= hi)]

def arrivals(run):
    """When the events of the steps from the one at which the load began arrived."""
    return [s[2] for s in run["steps"] if s[0] >= run["load_from_step"]]

print("flood: %d idle gRPC connections, %d reflection streams over %d channels, %d slow HTTP "
      "requests (client open-file limit %d%s)" % (
          f["idle"], f["reflection"], f["reflection_channels"], f["slow_http"],
          f["open_file_limit"], "" if f["scaled_by"] == 1 else
          ", scaled down by %.2f to fit it" % f["scaled_by"]))
print("opened in %.1f s from step %d; calls timed until +%.1f s; held %.1f s, until the job "
      "ended" % (f["opened_in_s"], f["load_from_step"], f["measured_in_s"], f["flood_held_s"]))
print()
fmt = "%-48s %14s %14s %14s %6s"
print(fmt % ("", "unloaded", "flooded", "unloaded after", "f/u"))

# f/u against the lower of the two unloaded runs: the other users of a shared machine slow a
# run, never speed it ("other processes" below says how much they took).
def row(label, fn):
    x, y, z = (fn(r) for r in runs)
    print(fmt % (label, "%.0f" % (x * 1000), "%.0f" % (y * 1000), "%.0f" % (z * 1000),
                 "%.2f" % (y / min(x, z))))

n = max(s[0] for s in f["steps"])
# The burst: the steps that ended between the flood's start and the end of the timed calls.
burst = [s[0] for s in f["steps"] if 0 <= s[2] <= f["measured_in_s"]]
lo, hi = min(burst), max(burst)
row("step ms, median of steps 6-%d" % n, lambda r: statistics.median(steps(r, 6)))
row("wall ms per step (event arrivals), steps %d-%d" % (f["load_from_step"] + 1, n),
    lambda r: (arrivals(r)[-1] - arrivals(r)[0]) / (len(arrivals(r)) - 1))
row("longest wait between two step events, ms",
    lambda r: max(y - x for x, y in zip(arrivals(r), arrivals(r)[1:])))
row("step ms, median of steps %d-%d (the burst)" % (lo, hi),
    lambda r: statistics.median(steps(r, lo, hi)))
row("step ms, max of steps %d-%d (the burst)" % (lo, hi), lambda r: max(steps(r, lo, hi)))
for k, what in (("list", "weftctl list"), ("submit", "weftctl submit"),
                ("scrape", "GET /metrics")):
    opening = f["latency_opening_s"][k]
    print(fmt % ("%s ms while the flood opened, max of %d" % (what, opening["n"]), "-",
                 "%.0f" % (opening["max"] * 1000), "-",
                 "%.2f" % (opening["max"] / min(u["latency_s"][k]["max"],
                                               a["latency_s"][k]["max"]))))
    row("%s ms, median of %d" % (what, f["latency_s"][k]["n"]),
        lambda r: r["latency_s"][k]["median"])
    row("%s ms, max of %d" % (what, f["latency_s"][k]["n"]), lambda r: r["latency_s"][k]["max"])
print()
fmt2 = "%-48s %14s %14s %14s"
print(fmt2 % ("coordinator", "unloaded", "flooded", "unloaded after"))
for label, fn in (
        ("RSS MiB at the 5th step", lambda r: "%.1f" % r["before"]["rss_mib"]),
        ("RSS MiB, most while the job ran", lambda r: "%.1f" % r["during"]["rss_mib_max"]),
        ("RSS MiB when the job ended", lambda r: "%.1f" % r["after"]["rss_mib"]),
        ("threads at the 5th step", lambda r: "%d" % r["before"]["threads"]),
        ("threads, most while the job ran", lambda r: "%d" % r["during"]["threads_max"]),
        ("CPU s from the 5th step to the end", lambda r: "%.2f" % r["during"]["coordinator_cpu_s"]),
        ("worker CPU s, the same span", lambda r: "%.2f" % r["during"]["worker_cpu_s"]),
        ("flood client's CPU s (weftctl's)",
         lambda r: "%.2f (%.2f)" % (r["during"]["client_cpu_s"], r["during"]["weftctl_cpu_s"])),
        ("other processes, cores", lambda r: "%.2f" % r["during"]["other_cores"])):
    print(fmt2 % (label, *(fn(r) for r in runs)))
print()
refl = f["reflection_outcome"]
print("reflection streams: %s; still open when the job ended: %d" % (
    ", ".join("%d %s" % (v, k) for k, v in sorted(refl.items(), key=lambda kv: -kv[1])),
    f["reflection_still_open"]))
closed = f.get("idle_closed_between_s")
print("idle gRPC connections: %d opened (%d failed to connect), %d closed by the server%s, %d "
      "still open when the job ended" % (
          f["idle"] - f["idle_open_failed"], f["idle_open_failed"], f["idle_closed_by_server"],
          " between +%.1f and +%.1f s" % tuple(closed) if closed else "", f["idle_still_open"]))
silence = f.get("slow_http_silence_at_close_s")
print("slow HTTP requests: %d opened (%d failed to connect), %d closed by the server%s, %d still "
      "open when the job ended" % (
          f["slow_http"] - f["slow_http_open_failed"], f["slow_http_open_failed"],
          f["slow_http_closed_by_server"],
          " (between +%.1f and +%.1f s, each %.1f-%.1f s after its last byte)" % (
              *f["slow_http_closed_between_s"], *silence) if silence else "",
          f["slow_http_still_open"]))
losses = lambda r: [s[3] for s in r["steps"]]
print("losses: %d steps; the flooded run's %s the unloaded run's bit for bit, the second "
      "unloaded run's %s" % (len(u["steps"]), "equal" if losses(f) == losses(u) else "DIFFER from",
                             "too" if losses(a) == losses(u) else "DIFFER"))
for name, r in (("unloaded", u), ("flooded", f), ("unloaded after", a)):
    bad = {j: s for j, s in r["tiny_jobs"].items() if s != "SUCCEEDED"}
    print("%s: job %s %s; %d of %d submitted 1-step jobs SUCCEEDED%s" % (
        name, r["job_id"], r["job_state"], len(r["tiny_jobs"]) - len(bad), len(r["tiny_jobs"]),
        "; not: %s" % bad if bad else ""))
    for failure in r["failures"]:
        print("  FAILED: " + failure)
PY
for name in unloaded flooded unloaded_after; do
  [[ ! -s "$tmp/$name.watch.err" ]] ||
    echo "$name: weftctl watch: $(tail -2 "$tmp/$name.watch.err")"
done
echo
echo "step ms: the worker's step_seconds; the burst: the steps that ended while the flood opened"
echo "and the calls were timed; wall ms and waits: between the step events that weftctl watch"
echo "printed; f/u: flooded / the lower of the two unloaded runs. Latencies: wall time of the"
echo "weftctl process (each dials afresh; submit sends a 1-step job) and of a scrape on a new"
echo "connection: one after another from the flood's start while it opens (its max against the"
echo "unloaded max), then 5 each (unloaded: 5 each from the 5th step). CPU s: from the 5th step to"
echo "the job's end; other processes: the rest of the machine's CPU over that span, in cores."
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
