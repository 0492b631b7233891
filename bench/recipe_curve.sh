#!/usr/bin/env bash
# Does Weft train a real model the way PyTorch does? examples/gpt2_recipe.yaml (a 4-block GPT-2,
# vocab 256, 64 wide, on the license texts in /usr/share/common-licenses, byte-level, the last
# 10% held out; warmup + cosine lr, clipping to norm 1, AdamW with decay on matrices only,
# 4 micro-batches, eval every 50 steps) runs through the real daemons (`weftctl local --ranks 2
# --json`, dp = 2) and, beside it, in Debian's PyTorch, float32 on the CPU
# (bench/recipe_torch.py: the same Hugging Face GPT-2 math in plain torch, the same batches in
# the same order, the same micro-batches, clipping, AdamW groups and schedule). Both start from
# the same weights: recipe_torch.py draws Hugging Face's init and writes it as a safetensors
# file, which Weft loads with `init_from:` (added to a copy of the example's spec) and PyTorch
# reads back. Prints the eval losses side by side with their relative differences, the training
# loss and grad norm at a few steps, the largest differences and each run's wall time (recorded,
# not a speed comparison: the daemons' start is in Weft's); writes both curves to a CSV and one
# plot (eval losses, training losses faintly) to a PNG. Exits 1 if an eval loss differs by more
# than RECIPE_TOL (relative, default 0.01), or the two runs' steps, lrs or eval steps differ.
# Usage: bash bench/recipe_curve.sh [PNG]   (from the repository root; installs python3-torch
#   and python3-matplotlib if missing)
#   PNG: default bench/recipe_curve.png; the CSV goes next to it (same name, .csv).
#   SKIP_BUILD=1 (run the binaries already in bazel-bin)   KEEP=DIR (keep the data, init, spec,
#   both runs' JSON lines in DIR)   RECIPE_TOL=0.01   RECIPE_THREADS=1 (PyTorch's intra-op
#   threads: the model's 64-wide matrices are too small for threads to pay; two threads made
#   PyTorch's steps 3x slower on the 2-core VM). Weft's 2 ranks get nproc/2 OpenBLAS threads each.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup
png=${1:-bench/recipe_curve.png}
csv=${png%.png}.csv
tol=${RECIPE_TOL:-0.01}
torch_threads=${RECIPE_THREADS:-1}
ranks=2  # the example's mesh: dp = 2
weft_threads=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))
bench_workdir
py() { /usr/bin/python3 bench/recipe_torch.py "$@"; }  # Debian's python3, where torch is

bench_header "${SKIP_BUILD:+(binaries not rebuilt)}"
echo "run: examples/gpt2_recipe.yaml + init_from (HF GPT-2 init, torch.manual_seed(1234)); weft:"
echo "$ranks ranks x $weft_threads OpenBLAS thread(s); pytorch" \
  "$(/usr/bin/python3 -c 'import torch; print(torch.__version__)'): 1 process x $torch_threads thread(s)"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# The data exactly as the example's header makes it (and tests/recipe_test.cc).
L=/usr/share/common-licenses
bazel-bin/client/weftctl data tokenize --bytes --holdout 0.1 --holdout_out "$tmp/licenses_val.bin" \
  $L/Apache-2.0 $L/Artistic $L/BSD $L/CC0-1.0 $L/GFDL-1.2 $L/GFDL-1.3 $L/GPL-1 $L/GPL-2 $L/GPL-3 \
  $L/LGPL-2 $L/LGPL-2.1 $L/LGPL-3 $L/MPL-1.1 $L/MPL-2.0 "$tmp/licenses.bin" | sed 's/^/data: /'
echo

# The initial weights, and the example's spec loading them (its relative paths resolve against
# the spec's folder, where the data is).
py init "$tmp/init.safetensors" 1234
{ grep -v '^init_from:' examples/gpt2_recipe.yaml; echo "init_from: init.safetensors"; } \
  > "$tmp/gpt2_recipe.yaml"

now() { date +%s.%N; }
t0=$(now)
OPENBLAS_NUM_THREADS=$weft_threads OMP_NUM_THREADS=$weft_threads \
  bazel-bin/client/weftctl local --ranks "$ranks" --json "$tmp/gpt2_recipe.yaml" \
  > "$tmp/weft.jsonl" 2> "$tmp/weft.err" ||
  { echo "weftctl local failed: $(grep -v '^{' "$tmp/weft.err" | tail -3) $(tail -1 "$tmp/weft.jsonl")"
    exit 1; }
t1=$(now)
OPENBLAS_NUM_THREADS=$torch_threads OMP_NUM_THREADS=$torch_threads \
  py train "$tmp/init.safetensors" "$tmp/licenses.bin" "$tmp/licenses_val.bin" "$torch_threads" \
  > "$tmp/torch.jsonl" 2> "$tmp/torch.err" ||
  { echo "pytorch failed: $(tail -3 "$tmp/torch.err")"; exit 1; }
t2=$(now)

py compare "$tmp/weft.jsonl" "$tmp/torch.jsonl" "$png" "$csv" "$tol" \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
