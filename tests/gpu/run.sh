#!/usr/bin/env bash
# The GPU check for a GPU node: builds with --config=cuda, runs every test tagged `cuda` with
# WEFT_REQUIRE_GPU=1 (kernel and communicator conformance on CUDA/NCCL, the CUDA end-to-end runs;
# nothing may skip for want of a GPU), then the quickstart job on cuda:0 next to the same job on
# cpu, and prints one summary line. Exits non-zero if anything fails or there is no GPU.
# Usage: bash tests/gpu/run.sh   (from anywhere in the repository)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/setup.sh >/dev/null

if ! gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); then gpus=0; fi
if [[ "$gpus" -eq 0 ]]; then
  echo "tests/gpu/run.sh: FAIL: no GPU here (nvidia-smi -L lists none); run it on a GPU node"
  exit 1
fi
nvidia-smi -L

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bazel build --config=cuda //...
set +e
bazel test --config=cuda --test_tag_filters=cuda --test_env=WEFT_REQUIRE_GPU=1 \
  --test_output=errors --test_summary=short //... 2>&1 | tee "$tmp/test.log"
test_rc=${PIPESTATUS[0]}
set -e
passed=$(grep -cE '^//.* PASSED' "$tmp/test.log" || true)
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS)' "$tmp/test.log" || true)

# The quickstart job on cuda:0 (its mesh shrunk to one rank unless there are 4 GPUs), and on cpu.
spec=examples/quickstart.yaml
ranks=4
if [[ "$gpus" -lt 4 ]]; then
  sed 's/shape: \[4\]/shape: [1]/' examples/quickstart.yaml > "$tmp/quickstart_1rank.yaml"
  spec="$tmp/quickstart_1rank.yaml"
  ranks=1
fi
steps() {  # weftctl --json lines -> "loss step_seconds" per step
  sed -n 's/^{"type":"step","step":[0-9]*,"loss":\([^,]*\),"step_seconds":\([^,]*\),.*/\1 \2/p'
}
set +e
bazel-bin/client/weftctl local --device cuda --ranks "$ranks" --json "$spec" > "$tmp/cuda.json"
cuda_rc=$?
bazel-bin/client/weftctl local --device cpu --ranks "$ranks" --json "$spec" > "$tmp/cpu.json"
cpu_rc=$?
set -e
steps < "$tmp/cuda.json" > "$tmp/cuda.txt"
steps < "$tmp/cpu.json" > "$tmp/cpu.txt"
quick=$(paste "$tmp/cuda.txt" "$tmp/cpu.txt" | awk '
  { d = $1 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3); if (r > worst) worst = r;
    t[NR] = $2; n = NR; last = $1 }
  END {
    if (n == 0) { print "no steps"; exit }
    # median step time over the steps after the first (warm-up)
    m = 0; for (i = 2; i <= n; i++) s[++m] = t[i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
    med = m > 0 ? s[int((m + 1) / 2)] : t[1]
    printf "%d steps, final loss %.6g, median step %.2f ms, max rel diff vs cpu %.2g", n, last, med * 1000, worst
  }')
worst=$(paste "$tmp/cuda.txt" "$tmp/cpu.txt" | awk '
  { d = $1 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3); if (r > w) w = r } END { print (NR > 0 && w <= 1e-4) ? "ok" : "bad" }')

status=PASS
[[ $test_rc -eq 0 && $cuda_rc -eq 0 && $cpu_rc -eq 0 && "$worst" == ok ]] || status=FAIL
echo "tests/gpu/run.sh: $status: $gpus GPU(s); cuda tests: $passed passed, $failed failed;" \
  "quickstart on cuda:0 ($ranks rank(s)): $quick"
[[ "$status" == PASS ]]
