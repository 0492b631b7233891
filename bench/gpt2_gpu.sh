#!/usr/bin/env bash
# GPT-2 124M (Hugging Face's GPT2Config: n_embd 768, 12 layers, 12 heads, vocab 50257, n_positions
# 1024, dropout 0) trained on one GPU through the real daemons (`weftctl local --device cuda
# --json`), T = 1024, B = 8, from the same transformers-initialized weights (`init_from`) as the
# node's PyTorch trains them (bench/gpt2_gpu.py): Weft in f32, with allow_tf32 and with
# `precision: bf16`; PyTorch eager in f32, TF32 and bf16 autocast, and bf16 with torch.compile.
# Then Weft's Hugging Face import and export against transformers: for gpt2, llama and qwen2 (tiny,
# made and saved by transformers), Weft's step-1 loss from `init_from` and its step-3 loss against
# transformers' float64 loss of the same batches, the latter from `ckpt export --format hf` of step
# 2 loaded by from_pretrained.
# Here (with Bazel):  bash bench/gpt2_gpu.sh --bundle DIR    (the --config=cuda daemons, bundled)
# There (a GPU node): bash bench/gpt2_gpu.sh DIR LOGDIR [PART...]   (logs in LOGDIR)
# Parts (default: bench hf): bench (the table above), hf (the import and export check), trace (a
# Weft f32 run of 3 steps with `trace: true`: LOGDIR/trace.json, its spans per block), ncu (one
# Weft f32 step under Nsight Compute, one metric: every kernel's GPU time, LOGDIR/ncu.csv; sum it
# per kernel family with `python3 bench/gpt2_gpu.py kernels LOGDIR/ncu.csv`).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

if [[ "${1:-}" == "--bundle" ]]; then
  set -e
  bazel build --config=cuda //client:weftctl //coordinator:weft-coordinator //worker:weft-worker
  rm -rf "$2"
  bash tools/bundle.sh "$2" client/weftctl coordinator/weft-coordinator worker/weft-worker
  exit 0
fi

bundle=$(cd "$1" && pwd)
logs=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
parts=" ${*:-bench hf} "
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' \
           2>/dev/null || true)
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_WAIT_POLICY=passive TEST_TMPDIR=/tmp PYTHONUNBUFFERED=1
weftctl=$bundle/bazel-bin/client/weftctl
work=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'

# Weft's step lines -> "loss step_seconds peak_bytes" per step.
steps_of() {
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{\"type\":\"step\""):
        s = json.loads(l); print(repr(s["loss"]), s["step_seconds"], s["peak_bytes"])' "$1"
}

# --- GPT-2 124M: Weft and PyTorch from the same weights ---------------------------------------
T=1024 B=8 STEPS=${GPT_STEPS:-6} WARMUP=${GPT_WARMUP:-2}
m124=$work/gpt2-124m
weft_run() {  # MODE [SPEC_LINE]: f32, tf32 or bf16, and a line added to the spec
  local mode=$1 extra="${2:-}" start
  [[ $mode == tf32 ]] && extra="allow_tf32: true"
  [[ $mode == bf16 ]] && extra="precision: bf16"
  [[ $# -ge 2 ]] && extra=$2
  cat >"$work/weft_$mode.yaml" <<EOF
name: gpt2_124m_$mode
mesh: {shape: [1], dim_names: [dp]}
model:
  arch: gpt2
  config: {vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 12, n_head: 12,
           layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}
init_from: $m124/model.safetensors
data: {source: tokens, path: $m124/tokens.bin, seq_len: $T, batch_size: $B}
optimizer: {type: adamw, lr: 6.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: $STEPS, seed: 1}
$extra
EOF
  start=$(date +%s)
  timeout "${WEFT_TIMEOUT:-150}" ${WEFT_WRAP:-} "$weftctl" local --ranks 1 --device cuda --json \
    ${WEFT_LOCAL_FLAGS:-} "$work/weft_$mode.yaml" >"$logs/weft_$mode.log" 2>&1
  echo "weft $mode: rc=$? in $(($(date +%s) - start)) s"
  steps_of "$logs/weft_$mode.log" >"$work/weft_$mode.txt"
}

if [[ "$parts" == *" bench "* || "$parts" == *" trace "* || "$parts" == *" ncu "* ]]; then
  python3 bench/gpt2_gpu.py init gpt2 124m "$m124" | tee "$logs/init124m.log"
fi

if [[ "$parts" == *" bench "* ]]; then
  # Weft's f32 first: the GPU's first GPT-2 124M step through Weft, and the baseline of the rest.
  weft_run f32
  for mode in f32 tf32 bf16 bf16-compile; do
    start=$(date +%s)
    timeout 240 python3 bench/gpt2_gpu.py train "$m124" $T $B $STEPS $WARMUP $mode \
      >"$logs/torch_$mode.log" 2>&1
    echo "torch $mode: rc=$? in $(($(date +%s) - start)) s"
  done
  weft_run tf32
  weft_run bf16
  # tokens/s and MFU by llm.c's count: 6N + 6*L*C*T FLOPs per token, N = 124,439,808 (tied head),
  # against the H100/H200's dense bf16 peak of 989 TFLOP/s.
  python3 - "$work" "$logs" $T $B $WARMUP <<'PY'
import json, statistics, sys
work, logs, T, B, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
N, L, C = 124439808, 12, 768
flops_per_token = 6 * N + 6 * L * C * T
def row(side, mode, losses, sec, peak):
    if sec is None:
        print("%-6s %-13s %s" % (side, mode, "failed (see its log)")); return
    tps = B * T / sec
    print("%-6s %-13s %9.1f %10.0f %6.2f%% %8.2f  %s" % (side, mode, sec * 1e3, tps,
          100 * tps * flops_per_token / 989e12, peak / 2**30, " ".join("%.6f" % l for l in losses[:4])))
print("%-6s %-13s %9s %10s %7s %8s  %s" % ("", "mode", "step ms", "tokens/s", "MFU", "peak GiB", "losses, steps 1-4"))
weft = {}
for mode in ["f32", "tf32", "bf16"]:
    try:
        rows = [l.split() for l in open("%s/weft_%s.txt" % (work, mode))]
    except OSError:
        rows = []
    t = [float(r[1]) for r in rows][warmup:]
    weft[mode] = [float(r[0]) for r in rows]
    row("weft", mode, weft[mode], statistics.median(t) if t else None,
        max([int(r[2]) for r in rows], default=0))
torch = {}
for mode in ["f32", "tf32", "bf16", "bf16-compile"]:
    try:
        d = json.loads(open("%s/torch_%s.log" % (logs, mode)).read().strip().splitlines()[-1])
        torch[mode] = d["losses"]
        row("torch", mode, d["losses"], d["median_step_seconds"], d["peak_bytes"])
    except Exception:
        row("torch", mode, [], None, 0)
for mode in ["f32", "tf32", "bf16"]:
    if weft.get(mode) and torch.get(mode):
        n = min(len(weft[mode]), len(torch[mode]))
        worst = max(abs(a - b) / abs(b) for a, b in zip(weft[mode][:n], torch[mode][:n]))
        print("loss weft vs torch %-5s: step 1 rel %.2e, steps 1-%d max rel %.2e" % (
            mode, abs(weft[mode][0] - torch[mode][0]) / abs(torch[mode][0]), n, worst))
PY

fi

if [[ "$parts" == *" hf "* ]]; then
# --- Hugging Face import and export against transformers (float64 on the CPU) ------------------
hf_ok=1
for arch in gpt2 llama qwen2; do
  dir=$work/hf_$arch
  python3 bench/gpt2_gpu.py init "$arch" tiny "$dir" >"$logs/hf_${arch}_init.log" 2>&1 ||
    { echo "hf $arch: transformers init failed"; tail -3 "$logs/hf_${arch}_init.log"; hf_ok=0; continue; }
  cat >"$dir/job.yaml" <<EOF
name: hf_$arch
mesh: {shape: [1], dim_names: [dp]}
model: {arch: $arch, config_file: $dir/config.json}
init_from: $dir/model.safetensors
data: {source: tokens, path: $dir/tokens.bin, seq_len: 64, batch_size: 8}
optimizer: {type: adamw, lr: 6.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: 3, seed: 1}
checkpoint: {dir: $dir/ckpt, every: 1, keep: 5}
EOF
  if ! timeout 120 "$weftctl" local --ranks 1 --device cuda --json "$dir/job.yaml" \
      >"$logs/hf_$arch.log" 2>&1; then
    echo "hf $arch: weft job with transformers' config.json failed: $(grep -v '^{' "$logs/hf_$arch.log" | tail -2)"
    hf_ok=0
    # Again with the same config inline (JSON is YAML), so that the weights are still checked.
    sed -i "s|^model: .*|model: {arch: $arch, config: $(cat "$dir/inline_config.json")}|" "$dir/job.yaml"
    rm -rf "$dir/ckpt"
    timeout 120 "$weftctl" local --ranks 1 --device cuda --json "$dir/job.yaml" >"$logs/hf_$arch.log" 2>&1 ||
      { echo "hf $arch: weft job failed: $(grep -v '^{' "$logs/hf_$arch.log" | tail -2)"; continue; }
  fi
  mkdir -p "$dir/export"
  "$weftctl" ckpt export --format hf "$dir/ckpt/step-2" "$dir/export/model.safetensors" \
    >>"$logs/hf_$arch.log" 2>&1 || { echo "hf $arch: export failed"; hf_ok=0; continue; }
  w1=$(steps_of "$logs/hf_$arch.log" | sed -n 1p | cut -d' ' -f1)
  w3=$(steps_of "$logs/hf_$arch.log" | sed -n 3p | cut -d' ' -f1)
  r1=$(python3 bench/gpt2_gpu.py loss "$dir" "$dir/tokens.bin" 64 8 1 2>>"$logs/hf_$arch.log")
  r3=$(python3 bench/gpt2_gpu.py loss "$dir/export" "$dir/tokens.bin" 64 8 3 2>>"$logs/hf_$arch.log")
  python3 - "$arch" "$w1" "$r1" "$w3" "$r3" <<'PY' || hf_ok=0
import sys
arch, w1, r1, w3, r3 = sys.argv[1], *map(float, sys.argv[2:])
d1, d3 = abs(w1 - r1) / abs(r1), abs(w3 - r3) / abs(r3)
ok = d1 <= 1e-5 and d3 <= 1e-5
print("hf %-5s: step 1 (init_from) weft %.8f transformers f64 %.8f rel %.1e; step 3 (export of "
      "step 2) weft %.8f transformers f64 %.8f rel %.1e  %s" % (arch, w1, r1, d1, w3, r3, d3,
                                                              "ok" if ok else "BAD"))
sys.exit(0 if ok else 1)
PY
done
echo "gpt2_gpu: hf checks $([[ $hf_ok -eq 1 ]] && echo PASS || echo FAIL)"
fi

# Where Weft's f32 step goes: its trace's spans (forward and backward per block, the optimizer).
if [[ "$parts" == *" trace "* ]]; then
  STEPS=3 WEFT_LOCAL_FLAGS="--trace $logs/trace.json" weft_run f32_trace "trace: true"
  python3 bench/gpt2_gpu.py spans "$logs/trace.json"
fi

# Every kernel of one Weft f32 step under Nsight Compute (one metric, so one pass per kernel).
if [[ "$parts" == *" ncu "* ]]; then
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  STEPS=1 WEFT_TIMEOUT=${NCU_TIMEOUT:-240} \
    WEFT_WRAP="$ncu --clock-control none --target-processes all --metrics gpu__time_duration.sum --print-units base --csv --page raw --log-file $logs/ncu.csv" \
    weft_run f32_ncu
  python3 bench/gpt2_gpu.py kernels "$logs/ncu.csv"
fi
rm -rf "$work"
