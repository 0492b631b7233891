# Shared by the bench/*.sh scripts: `source bench/lib.sh`.

# Installs what the benches compare against (tools/setup.sh --bench) and, unless SKIP_BUILD is
# set, builds the daemons and weftctl; run from the repository root.
bench_setup() {
  bash tools/setup.sh --bench >/dev/null
  if [[ -z "${SKIP_BUILD:-}" ]]; then
    bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker >/dev/null 2>&1 ||
      { echo "bazel build failed (run it to see why; SKIP_BUILD=1 uses bazel-bin as it is)" >&2; exit 1; }
  fi
}

# Sets tmp, the run's working folder: $KEEP when set (made if missing, kept after the run), else
# a new folder removed when the script exits.
bench_workdir() {
  if [[ -n "${KEEP:-}" ]]; then
    tmp=$KEEP
    mkdir -p "$tmp"
  else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
  fi
}

# bench_workdir, and `pids`, the daemons the script starts (`pids+=("$!")`): at exit each is
# stopped (SIGTERM, then waited for) before the working folder goes.
bench_workdir_with_daemons() {
  bench_workdir
  pids=()
  trap bench_stop_daemons EXIT
}
bench_stop_daemons() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  [[ -n "${KEEP:-}" ]] || rm -rf "$tmp"
}

# wait_for_file FILE SECONDS: until FILE is non-empty (a daemon writes its port there); exits the
# script saying so after SECONDS.
wait_for_file() {
  local deadline=$((SECONDS + $2))
  until [[ -s "$1" ]]; do
    ((SECONDS < deadline)) || { echo "no $1 after $2 s; logs in $tmp" >&2; exit 1; }
    sleep 0.05
  done
}

# stdin: `weftctl local --json` lines; prints "median min" of step_seconds over the steps after
# the first 5 (warm-up), or "- -" when there are none.
median_step() {
  python3 -c '
import json, statistics, sys
t = [json.loads(l)["step_seconds"] for l in sys.stdin if l.startswith("{\"type\":\"step\"")]
t = t[5:]
print("%.4f %.4f" % (statistics.median(t), min(t)) if t else "- -")'
}

# median_seconds WARMUP: stdin `weftctl local --json` lines; prints the median step_seconds of the
# steps after the first WARMUP, or "-" when there are none.
median_seconds() {
  python3 -c '
import json, statistics, sys
t = [json.loads(l)["step_seconds"] for l in sys.stdin if l.startswith("{\"type\":\"step\"")]
t = t[int(sys.argv[1]):]
print("%.4f" % statistics.median(t) if t else "-")' "$1"
}

# Prints the machine (CPU model, cores) and the date and commit a run measures; the commit is
# marked +dirty when the tree differs from it outside bench/ and *.md (what the binaries are built
# from). $1, if given, is appended to the commit line, e.g. "(binaries not rebuilt)".
bench_header() {
  local cpu dirty=""
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
  git diff --quiet HEAD -- ':!bench' ':!*.md' || dirty=+dirty
  echo "machine: $cpu, $(nproc) cores"
  echo "date: $(date -u +%Y-%m-%d)   commit: $(git rev-parse --short HEAD)$dirty${1:+ $1}"
}

# write_gpt_tokens FILE: an llm.c token file, 256 int32 header [20240520, 1, ntokens, 0...] then
# 8 * 256 * 64 + 1 uint16 ids uniform in [0, 8192) (numpy's default_rng(0)): the GPT-2 benches' data.
write_gpt_tokens() {
  /usr/bin/python3 -c "
import numpy as np
n = 8 * 256 * 64 + 1
h = np.zeros(256, np.int32); h[:3] = [20240520, 1, n]
t = np.random.default_rng(0).integers(0, 8192, n, dtype=np.uint16)
with open('$1', 'wb') as f:
    f.write(h.tobytes()); f.write(t.tobytes())"
}

# gpt2_bench_spec NAME MESH TOKENS BATCH STEPS [DATA_EXTRA]: the YAML of the GPT-2 benches' job
# (n_embd 512, 8 heads, 4 layers, vocab 8192, T 256, dropout 0, AdamW lr 1e-4) on stdout; MESH a
# flow mapping, DATA_EXTRA appended inside `data` (e.g. ", placements: {dp: Shard(0)}").
gpt2_bench_spec() {
  cat <<EOF
name: $1
mesh: $2
model:
  arch: gpt2
  config: {vocab_size: 8192, n_positions: 256, n_embd: 512, n_layer: 4, n_head: 8,
           layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}
data: {source: tokens, path: $3, seq_len: 256, batch_size: $4${6:-}}
optimizer: {type: adamw, lr: 1.0e-4, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: $5, seed: 1234}
EOF
}

# write_random_npy DIR ROWS COLS: DIR/inputs.npy and DIR/labels.npy, ROWS x COLS float32 uniform
# in [-1, 1) (numpy's default_rng(0)), the npy data of the bench specs.
write_random_npy() {
  /usr/bin/python3 -c "
import numpy as np
r = np.random.default_rng(0)
np.save('$1/inputs.npy', r.uniform(-1, 1, ($2, $3)).astype(np.float32))
np.save('$1/labels.npy', r.uniform(-1, 1, ($2, $3)).astype(np.float32))"
}

# bench_netns_hosts N: N "hosts" for a script already running in a network namespace of its own
# (unshare --net): each a namespace held by `unshare --net sleep infinity` (holder[h], added to
# pids so it goes at exit) and joined to the script's namespace by a veth pair, host h at
# 10.213.h.2 and the script's end at 10.213.h.1 (where a coordinator listening on 0.0.0.0 is
# reached), routed through the script's namespace. in_host H CMD... runs CMD inside host H.
bench_netns_hosts() {
  local h pid
  holder=()
  ip link set lo up
  echo 1 > /proc/sys/net/ipv4/ip_forward
  for ((h = 1; h <= $1; h++)); do
    unshare --net sleep infinity &
    pid=$!
    pids+=("$pid")
    until [[ "$(readlink /proc/$pid/ns/net)" != "$(readlink /proc/self/ns/net)" ]]; do sleep 0.01; done
    holder[h]=$pid
    ip link add "host$h" type veth peer name eth0 netns "$pid"
    ip address add "10.213.$h.1/24" dev "host$h"
    ip link set "host$h" up
    in_host "$h" ip link set lo up
    in_host "$h" ip address add "10.213.$h.2/24" dev eth0
    in_host "$h" ip link set eth0 up
    in_host "$h" ip route add default via "10.213.$h.1"
  done
}
in_host() {
  local h=$1
  shift
  nsenter "--net=/proc/${holder[h]}/ns/net" -- "$@"
}

# shape_links MBIT: every host's link limited to MBIT Mbit/s each way by tc's token bucket (this
# kernel has no netem: a rate, no delay); 0 removes the limit. Inside a host stays unlimited.
shape_links() {
  local h
  for h in "${!holder[@]}"; do
    if (($1 > 0)); then
      tc qdisc replace dev "host$h" root tbf rate "${1}mbit" burst 64kb latency 100ms
      in_host "$h" tc qdisc replace dev eth0 root tbf rate "${1}mbit" burst 64kb latency 100ms
    else
      tc qdisc del dev "host$h" root 2>/dev/null || true
      in_host "$h" tc qdisc del dev eth0 root 2>/dev/null || true
    fi
  done
}
