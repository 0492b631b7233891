"""The PyTorch and Hugging Face side of bench/gpt2_gpu.sh, on a GPU node (its python3 holds torch
and transformers; nothing here runs in CI).

Subcommands:
  init ARCH SIZE OUTDIR          a transformers model of ARCH (gpt2, llama, qwen2) and SIZE (124m:
                                 Hugging Face's GPT2Config with dropout 0; tiny: 2 layers, width
                                 64, GQA for llama/qwen2), seeded, saved with save_pretrained
                                 (OUTDIR/model.safetensors and config.json), plus OUTDIR/tokens.bin:
                                 an llm.c token file of ids uniform in [0, vocab) (numpy seed 0).
  train OUTDIR T B STEPS WARMUP MODE
                                 trains that model on cuda:0 as Weft's job does (sample i =
                                 tokens[i*T : i*T+T+1], step s reads samples (s-1)*B .. s*B-1, mean
                                 token cross-entropy, AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, no
                                 weight decay); MODE f32, tf32, bf16 (autocast) or bf16-compile
                                 (autocast and torch.compile). Prints one JSON line: losses, median
                                 step seconds after WARMUP steps, peak memory.
  spans TRACE.json               Weft's trace of a job: time per span name (block numbers folded)
                                 and category, per step.
  kernels NCU.csv                `ncu --csv --page raw` of gpu__time_duration.sum: GPU time per
                                 kernel family (the name up to its first '(' or '<').
  loss MODELDIR TOKENS T B STEP  the float64 loss, on the CPU, of the model in MODELDIR (loaded by
                                 transformers' from_pretrained: Weft's `ckpt export --format hf`)
                                 on step STEP's batch. Prints it.
"""
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers

LR, BETAS, EPS = 6e-4, (0.9, 0.95), 1e-8


def make_config(arch, size):
    if arch == "gpt2":
        dims = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12) \
            if size == "124m" else dict(vocab_size=512, n_positions=128, n_embd=64, n_layer=2,
                                        n_head=4)
        return transformers.GPT2Config(**dims, layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                                       embd_pdrop=0.0, attn_pdrop=0.0)
    assert size == "tiny", "only gpt2 has a 124m size"
    dims = dict(vocab_size=512, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                max_position_embeddings=128, tie_word_embeddings=False, attention_dropout=0.0)
    if arch == "llama":
        return transformers.LlamaConfig(**dims)
    if arch == "qwen2":
        return transformers.Qwen2Config(**dims, use_sliding_window=False)
    raise SystemExit("unknown arch " + arch)


def model_class(arch):
    return {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
            "qwen2": transformers.Qwen2ForCausalLM}[arch]


def init(arch, size, outdir):
    config = make_config(arch, size)
    torch.manual_seed(0)
    model = model_class(arch)(config)
    model.save_pretrained(outdir, safe_serialization=True)
    # The same config as Weft's inline `model.config` (a fallback should Weft refuse config.json).
    keys = {"gpt2": ["vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                     "layer_norm_epsilon", "embd_pdrop", "attn_pdrop", "resid_pdrop"]}.get(
        arch, ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
               "max_position_embeddings", "tie_word_embeddings", "attention_dropout"])
    inline = {k: getattr(config, k) for k in keys}
    if arch != "gpt2":
        inline["rope_theta"] = 10000.0
    with open(outdir + "/inline_config.json", "w") as f:
        json.dump(inline, f)
    n = 8 * 1024 * 16 + 1 if size == "124m" else 8 * 64 * 8 + 1
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, n]
    ids = np.random.default_rng(0).integers(0, config.vocab_size, n, dtype=np.uint16)
    with open(outdir + "/tokens.bin", "wb") as f:
        f.write(header.tobytes())
        f.write(ids.tobytes())
    print(json.dumps({"arch": arch, "size": size, "parameters": sum(p.numel() for p in
                                                                     model.parameters())}))


def tokens_of(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520 and header[1] == 1, path + " is not an llm.c token file"
    return np.memmap(path, dtype=np.uint16, mode="r", offset=1024, shape=(int(header[2]),))


def batch(tokens, step, T, B, device):
    """Step `step`'s batch (1-based) as (inputs, targets) int64 tensors."""
    nsamples = (len(tokens) - 1) // T
    rows = [((step - 1) * B + r) % nsamples for r in range(B)]
    buf = torch.from_numpy(np.stack([tokens[i * T:i * T + T + 1] for i in rows]).astype(np.int64))
    return buf[:, :T].to(device), buf[:, 1:].to(device)


def train(outdir, T, B, steps, warmup, mode):
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    config = json.load(open(outdir + "/config.json"))
    model = model_class(config["model_type"]).from_pretrained(outdir, dtype=torch.float32).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0,
                            fused=True)
    tokens = tokens_of(outdir + "/tokens.bin")
    forward = torch.compile(model) if mode == "bf16-compile" else model
    losses, seconds = [], []
    for step in range(1, steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        x, y = batch(tokens, step, T, B, "cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode.startswith("bf16")):
            logits = forward(input_ids=x).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"mode": mode, "torch": torch.__version__, "losses": losses,
                      "median_step_seconds": statistics.median(seconds[warmup:]),
                      "peak_bytes": torch.cuda.max_memory_allocated()}))


def loss(modeldir, tokens_path, T, B, step):
    config = json.load(open(modeldir + "/config.json"))
    model = model_class(config["model_type"]).from_pretrained(modeldir, dtype=torch.float64)
    model.eval()
    x, y = batch(tokens_of(tokens_path), step, T, B, "cpu")
    with torch.no_grad():
        logits = model(input_ids=x).logits
    print("%.12g" % F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)).item())


def spans(path):
    import collections
    import re
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = sum(e["name"] == "load" for e in events) or 1  # one batch load a step
    by_name, by_cat = collections.Counter(), collections.Counter()
    for e in events:
        by_name[re.sub(r"\d+", "N", e["name"])] += e["dur"]
        by_cat[e.get("cat", "")] += e["dur"]
    total = sum(by_cat.values())
    print("trace: %d spans, %d step(s), %.1f ms a step in spans" % (len(events), steps,
                                                                    total / 1e3 / steps))
    for name, us in by_cat.most_common():
        print("  category %-24s %9.1f ms/step %5.1f%%" % (name, us / 1e3 / steps, 100 * us / total))
    for name, us in by_name.most_common(12):
        print("  %-33s %9.1f ms/step %5.1f%%" % (name[:33], us / 1e3 / steps, 100 * us / total))


def kernels(path):
    import collections
    import csv
    rows = list(csv.reader(l for l in open(path) if l.startswith('"')))
    header = rows[0]
    name_col, time_col = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    ns, count = collections.Counter(), collections.Counter()
    for r in rows[1:]:
        try:
            t = float(r[time_col].replace(",", ""))
        except ValueError:
            continue  # the units row
        name = r[name_col].replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
        family = name.removeprefix("void ").split("(")[0].split("<")[0].strip()
        ns[family] += t
        count[family] += 1
    total = sum(ns.values())
    print("ncu: %d kernels, %.1f ms of GPU time" % (sum(count.values()), total / 1e6))
    for family, t in ns.most_common(20):
        print("  %-48s %6d launches %9.2f ms %5.1f%%" % (family[:48], count[family], t / 1e6,
                                                        100 * t / total))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "init":
        init(*args)
    elif cmd == "train":
        train(args[0], *map(int, args[1:5]), args[5])
    elif cmd == "spans":
        spans(*args)
    elif cmd == "kernels":
        kernels(*args)
    elif cmd == "loss":
        loss(args[0], args[1], *map(int, args[2:5]))
    else:
        raise SystemExit(__doc__)
