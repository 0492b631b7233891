#!/usr/bin/env bash
# The auto-parallel search against measurement (issue 31), on hosts made of network namespaces:
# two hosts of two cpu workers each (registered by turns, a b a b), the link between the hosts
# limited to AUTO_MBIT (200) Mbit/s each way by tc's token bucket and then unshaped. For each link
# setting the test bed is calibrated first (weft-calibrate on all four workers' namespaces: the
# kernels, and the links inside a host and across), then for each model — the seed's MLP
# (examples/dp_mp.yaml: 1024 -> 4096 -> 1024, at [32, 1024] samples), a small GPT-2 and a small
# Llama with grouped-query attention — `weftctl plan --auto --json` lists every strategy of 4
# ranks it can plan, with its predicted step, and every one of them is run through the daemons:
# the median step of AUTO_STEPS (10) after AUTO_WARMUP (3), and the peak bytes the workers
# measured against the planned peak. auto_search.py prints, per model and link, the MAPE of the
# predictions, Kendall's tau of predicted against measured order, the top-1 regret (measured step
# of the search's pick over the best measured, minus 1) and how many peaks were exact, and draws
# predicted against measured step time per plan (auto_search.png, or $AUTO_PNG).
# Usage: bash bench/auto_search.sh   (as root, from the repository root). AUTO_MODELS="mlp gpt2
#   llama", AUTO_LINKS="200 0" (Mbit/s; 0 unshaped), AUTO_SPACE=all|norecompute (norecompute
#   runs only the strategies without recompute: a third of them), KEEP=DIR keeps the runs,
#   SKIP_BUILD=1 uses bazel-bin as it is. It runs in a network namespace of its own (re-executing
#   itself under unshare), so the hosts, links and rules vanish with it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${WEFT_BENCH_NETNS:-}" ]]; then
  source bench/lib.sh
  bash tools/setup.sh --bench >/dev/null
  if [[ -z "${SKIP_BUILD:-}" ]]; then
    bazel build //client:weftctl //coordinator:weft-coordinator //worker:weft-worker \
      //worker/calibrate:weft-calibrate >/dev/null 2>&1 ||
      { echo "bazel build failed (run it to see why)" >&2; exit 1; }
  fi
  bench_header
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  exec unshare --net env WEFT_BENCH_NETNS=1 bash "$0" "$@"
fi
source bench/lib.sh
bench_workdir_with_daemons
bin=$(readlink -f bazel-bin)
models=${AUTO_MODELS:-mlp gpt2 llama}
links=${AUTO_LINKS:-200 0}
warmup=${AUTO_WARMUP:-3}
steps=$((warmup + ${AUTO_STEPS:-10}))
space=${AUTO_SPACE:-all}
bench_netns_hosts 2
hosts="10.213.1.2:2,10.213.2.2:2"

write_gpt_tokens "$tmp/tokens.bin"
# The seed's MLP at 32 positions a sample (its [128, 1024] takes seconds a step on these 2 cores).
sed -e "s/^train: .*/train: {steps: $steps, seed: 1234}/" -e "s/\[128, 1024\]/[32, 1024]/g" \
  examples/dp_mp.yaml > "$tmp/mlp.yaml"
cat > "$tmp/gpt2.yaml" <<YAML
name: gpt2_small
mesh: {shape: [4], dim_names: [dp]}
model:
  arch: gpt2
  config: {vocab_size: 8192, n_positions: 128, n_embd: 256, n_layer: 4, n_head: 8,
           layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}
data: {source: tokens, path: $tmp/tokens.bin, seq_len: 128, batch_size: 16,
       placements: {dp: Shard(0)}}
optimizer: {type: adamw, lr: 1.0e-4, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: $steps, seed: 1234}
YAML
cat > "$tmp/llama.yaml" <<YAML
name: llama_small
mesh: {shape: [4], dim_names: [dp]}
model:
  arch: llama
  config: {vocab_size: 8192, hidden_size: 256, intermediate_size: 688, num_hidden_layers: 4,
           num_attention_heads: 8, num_key_value_heads: 4, rms_norm_eps: 1.0e-5,
           rope_theta: 10000.0, max_position_embeddings: 128, tie_word_embeddings: false,
           attention_dropout: 0.0}
data: {source: tokens, path: $tmp/tokens.bin, seq_len: 128, batch_size: 16,
       placements: {dp: Shard(0)}}
optimizer: {type: adamw, lr: 1.0e-4, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: $steps, seed: 1234}
YAML

# calibrate LINK: weft-calibrate as 4 ranks on the hosts, ranks 0 1 on the first and 2 3 on the
# second (as topology placement lays a job's ranks: the 4-rank ring crosses between the hosts once
# each way), the profile to $tmp/profile.LINK.json.
calibrate() {
  local r h started=()
  rm -rf "$tmp/store.$1"
  mkdir -p "$tmp/store.$1"
  for r in 0 1 2 3; do
    h=$((r / 2 + 1))
    in_host "$h" env OMP_WAIT_POLICY=passive "$bin/worker/calibrate/weft-calibrate" --rank "$r" --world 4 \
      --store "$tmp/store.$1" --host "10.213.$h.2" --out "$tmp/profile.$1.json" \
      > "$tmp/calibrate.$1.$r.log" 2>&1 &
    started+=("$!")
  done
  for r in "${started[@]}"; do wait "$r" || { echo "weft-calibrate failed: $tmp/calibrate.$1.*.log" >&2; exit 1; }; done
}

# cluster LINK: a coordinator and the four workers (registered a b a b); sets ctl.
cluster() {
  local w h
  rm -f "$tmp/port"
  "$bin/coordinator/weft-coordinator" --listen 0.0.0.0:0 --data_dir "$tmp/db.$1" \
    --port_file "$tmp/port" > "$tmp/coordinator.$1.log" 2>&1 &
  pids+=("$!")
  wait_for_file "$tmp/port" 30
  ctl=("$bin/client/weftctl" --coordinator "127.0.0.1:$(cat "$tmp/port")")
  for w in 0 1 2 3; do
    h=$((w % 2 + 1))
    in_host "$h" "$bin/worker/weft-worker" --coordinator "10.213.$h.1:$(cat "$tmp/port")" \
      --host "10.213.$h.2" > "$tmp/worker.$1.$w.log" 2>&1 &
    pids+=("$!")
    until (($("${ctl[@]}" workers | grep -c worker-) == w + 1)); do sleep 0.05; done
  done
}

rows="$tmp/rows.tsv"
: > "$rows"
for link in $links; do
  shape_links "$link"
  calibrate "$link"
  cluster "$link"
  for model in $models; do
    "$bin/client/weftctl" plan --auto --json "$tmp/$model.yaml" --ranks 4 --hosts "$hosts" \
      --profile "$tmp/profile.$link.json" > "$tmp/search.$model.$link.json"
    # One spec per ranked strategy: the model's spec with the strategy's keys.
    /usr/bin/python3 bench/auto_search.py specs "$tmp/$model.yaml" \
      "$tmp/search.$model.$link.json" "$tmp/specs.$model.$link" "$space" > "$tmp/list.$model.$link"
    n=$(wc -l < "$tmp/list.$model.$link")
    echo "link $link Mbit/s, $model: $n strategies to run"
    while IFS=$'\t' read -r index label predicted tail planned_peak; do
      spec="$tmp/specs.$model.$link/$index.yaml"
      out="$tmp/run.$model.$link.$index.json"
      "${ctl[@]}" submit "$spec" --watch --json > "$out" || true
      measured=$(median_seconds "$warmup" < "$out")
      peak=$(/usr/bin/python3 -c 'import json,sys
p=[json.loads(l).get("peak_bytes",0) for l in open(sys.argv[1]) if l.startswith("{\"type\":\"step\"")]
print(max(p) if p else "-")' "$out")
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$link" "$index" "$label" "$predicted" \
        "$tail" "$measured" "$planned_peak" "$peak" >> "$rows"
    done < "$tmp/list.$model.$link"
  done
  bench_stop_cluster=("${pids[@]}")
  for p in "${bench_stop_cluster[@]}"; do
    [[ " ${holder[*]} " == *" $p "* ]] || kill "$p" 2>/dev/null || true
  done
done
/usr/bin/python3 bench/auto_search.py report "$rows" "${AUTO_PNG:-bench/auto_search.png}"
