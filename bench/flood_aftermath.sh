#!/usr/bin/env bash
# What connection floods leave behind (issue 30; bench/hostile_load.sh found both): a coordinator
# with its metrics server on 127.0.0.1, no job. bench/flood_aftermath.py floods its gRPC port
# FLOODS (4) times with IDLE (5,000) idle connections and samples its RSS each second after the
# server has closed them; then holds SLOW (4,200) GET /metrics requests that drip a header byte
# every 2-4 s and times a scrape each second. Prints the runs' JSON.
# Usage: bash bench/flood_aftermath.sh   (from the repository root; about 2 minutes after the
#   build). SKIP_BUILD=1 uses the binary as it is, COORDINATOR_BIN another one (default
#   bazel-bin/coordinator/weft-coordinator); MALLOC_ARENA_MAX etc. pass to the coordinator.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
if [[ -z "${SKIP_BUILD:-}" ]]; then
  bazel build //coordinator:weft-coordinator >/dev/null 2>&1 ||
    { echo "bazel build failed (run it to see why)" >&2; exit 1; }
fi
bench_workdir_with_daemons
bench_header
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"${COORDINATOR_BIN:-bazel-bin/coordinator/weft-coordinator}" --listen 127.0.0.1:0 --data_dir "$tmp/db" \
  --port_file "$tmp/grpc.port" --metrics_listen 127.0.0.1:0 \
  --metrics_port_file "$tmp/metrics.port" > "$tmp/coordinator.log" 2>&1 &
coordinator=$!
pids+=("$coordinator")
wait_for_file "$tmp/grpc.port" 30
wait_for_file "$tmp/metrics.port" 30
/usr/bin/python3 bench/flood_aftermath.py --grpc_port "$(cat "$tmp/grpc.port")" \
  --metrics_port "$(cat "$tmp/metrics.port")" --pid "$coordinator" \
  --floods "${FLOODS:-4}" --idle "${IDLE:-5000}" --slow "${SLOW:-4200}"
