"""examples/gpt2_recipe.yaml's training run in Debian's PyTorch (CPU, float32), for
bench/recipe_curve.sh, which runs Weft on the same spec beside it and compares the two.

The run, as the example's spec writes it (the constants below; `compare` checks the learning
rate of every step and the eval steps against Weft's own report, so a spec that drifts from them
fails loudly):
  model   GPT-2 with Hugging Face's math (GPT2LMHeadModel), in plain torch: wte [V,C] + wpe [P,C];
          per block x + c_proj(attn(ln_1(x))), then x + mlp(ln_2(x)); c_attn a Conv1D [C,3C] whose
          output splits into q, k, v in that order, heads of D = C/H, causal softmax of
          q k^T / sqrt(D); mlp c_proj(gelu_tanh(c_fc(x))) with c_fc [C,4C]; ln_f; logits =
          x @ wte^T (tied); LayerNorm eps 1e-5; no dropout (the spec's pdrops are 0). Loss: the
          mean token cross-entropy. V 256, P 64, C 64, 4 layers, 4 heads.
  data    llm.c token files; sample i = tokens[i*T : i*T+T] and its targets one token later;
          step s (from 1) reads samples (s-1)*B .. s*B-1, each modulo (tokens-1)//T. B 32, T 64.
  step    4 micro-batches of 8 consecutive samples, each micro-batch's mean loss scaled by 1/4
          and its gradient accumulated (the batch's mean); clip_grad_norm_(1.0) over all
          parameters; AdamW betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the parameters of
          2+ dims in Hugging Face's shapes (weights, wte, wpe) and 0 on the rest.
  lr      step s (1..300): 3e-3*s/30 for s <= 30, then cosine to 3e-4 at step 300.
  eval    after steps 50, 100, ..., 300: the mean over eval batches j = 0..7 of the mean token
          CE of samples j*B .. j*B+B-1 of the held-out file (no wrap), no grad.

Modes:
  init OUT.safetensors [SEED]
      Hugging Face's GPT-2 init (normal std 0.02 for weights and embeddings, 0.02/sqrt(2*n_layer)
      for the c_proj weights, zero biases, unit LayerNorm gains) from torch.manual_seed(SEED,
      default 1234), written as a safetensors file with Hugging Face's names and layouts,
      float32 little-endian, by hand (Debian has no python3-safetensors). Weft reads it with
      `init_from:`; `train` reads it back, so both start from the same bits.
  train INIT.safetensors TRAIN.bin VAL.bin THREADS
      trains, printing JSON lines shaped like `weftctl local --json`'s: {"type":"step","step",
      "loss","lr","grad_norm"} per step and {"type":"eval","step","loss"} per evaluation.
  compare WEFT.jsonl TORCH.jsonl PNG CSV TOLERANCE [WEFT_SECONDS TORCH_SECONDS]
      prints the eval losses side by side with their relative differences, the training loss,
      grad norm and lr at a few steps, the largest differences; writes both curves to CSV and a
      plot to PNG; exits 1 if an eval point differs by more than TOLERANCE (relative) or the
      runs' steps, learning rates or eval steps do not match.
"""
import csv
import json
import math
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

V, P, C, L, H = 256, 64, 64, 4, 4  # model.config
EPS = 1e-5                         # layer_norm_epsilon
T, B = 64, 32                      # data.seq_len, data.batch_size
MICRO = 4                          # train.micro_batches
STEPS = 300                        # train.steps
LR, MIN_LR, WARMUP = 3e-3, 3e-4, 30
BETAS, ADAM_EPS, WD, CLIP = (0.9, 0.95), 1e-8, 0.1, 1.0
EVAL_EVERY, EVAL_BATCHES = 50, 8


def shapes():
    """Hugging Face's GPT-2 parameter names and shapes, in its order."""
    out = [("wte.weight", [V, C]), ("wpe.weight", [P, C])]
    for i in range(L):
        h = f"h.{i}."
        out += [(h + "ln_1.weight", [C]), (h + "ln_1.bias", [C]),
                (h + "attn.c_attn.weight", [C, 3 * C]), (h + "attn.c_attn.bias", [3 * C]),
                (h + "attn.c_proj.weight", [C, C]), (h + "attn.c_proj.bias", [C]),
                (h + "ln_2.weight", [C]), (h + "ln_2.bias", [C]),
                (h + "mlp.c_fc.weight", [C, 4 * C]), (h + "mlp.c_fc.bias", [4 * C]),
                (h + "mlp.c_proj.weight", [4 * C, C]), (h + "mlp.c_proj.bias", [C])]
    return out + [("ln_f.weight", [C]), ("ln_f.bias", [C])]


def init(path, seed):
    torch.manual_seed(seed)
    tensors = {}
    for name, shape in shapes():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = torch.ones(shape)
        elif len(shape) == 1:
            t = torch.zeros(shape)
        else:  # HF's _init_weights: normal(0, 0.02); c_proj weights scaled by 1/sqrt(2 n_layer)
            std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
            t = torch.randn(shape) * std
        tensors[name] = t.contiguous()
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes with spaces
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", name
        b, e = meta["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy()).view(meta["shape"])
    return out


def load_tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520 and header[1] == 1, f"{path}: not an llm.c uint16 token file"
    tokens = np.fromfile(path, dtype="<u2", offset=1024, count=int(header[2]))
    return torch.from_numpy(tokens.astype(np.int64))


def samples(tokens, rows):
    """(inputs, targets) of the given sample indices, each [len(rows), T]."""
    buf = torch.stack([tokens[i * T:i * T + T + 1] for i in rows])
    return buf[:, :T], buf[:, 1:]


def forward(p, idx, targets):
    """Mean token cross-entropy of GPT2LMHeadModel with parameters p (HF names and layouts)."""
    b, t = idx.shape
    d = C // H
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    x = F.embedding(idx, p["wte.weight"]) + p["wpe.weight"][:t]
    for i in range(L):
        h = lambda n: p[f"h.{i}.{n}"]
        a = F.layer_norm(x, (C,), h("ln_1.weight"), h("ln_1.bias"), EPS).view(b * t, C)
        qkv = torch.addmm(h("attn.c_attn.bias"), a, h("attn.c_attn.weight"))
        q, k, v = qkv.view(b, t, 3, H, d).permute(2, 0, 3, 1, 4)  # each [b, H, t, d]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b * t, C)
        x = x + torch.addmm(h("attn.c_proj.bias"), y, h("attn.c_proj.weight")).view(b, t, C)
        m = F.layer_norm(x, (C,), h("ln_2.weight"), h("ln_2.bias"), EPS).view(b * t, C)
        f = F.gelu(torch.addmm(h("mlp.c_fc.bias"), m, h("mlp.c_fc.weight")), approximate="tanh")
        x = x + torch.addmm(h("mlp.c_proj.bias"), f, h("mlp.c_proj.weight")).view(b, t, C)
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], EPS)
    logits = x.view(b * t, C) @ p["wte.weight"].t()
    return F.cross_entropy(logits, targets.reshape(-1))


def lr_at(s):
    if s <= WARMUP:
        return LR * s / WARMUP
    prog = min(1.0, (s - WARMUP) / (STEPS - WARMUP))
    return MIN_LR + (LR - MIN_LR) * 0.5 * (1.0 + math.cos(math.pi * prog))


def train(init_path, train_path, val_path, threads):
    torch.set_num_threads(threads)
    p = {n: torch.nn.Parameter(t) for n, t in load_safetensors(init_path).items()}
    assert sorted(p) == sorted(n for n, _ in shapes()), "init file: other parameters"
    tokens, val = load_tokens(train_path), load_tokens(val_path)
    nsamples = (len(tokens) - 1) // T
    assert (len(val) - 1) // T >= EVAL_BATCHES * B, "too few held-out samples"
    decay = [t for t in p.values() if t.dim() >= 2]
    no_decay = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS)
    params = list(p.values())
    mb = B // MICRO
    for s in range(1, STEPS + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        for k in range(MICRO):
            rows = [((s - 1) * B + k * mb + r) % nsamples for r in range(mb)]
            x, y = samples(tokens, rows)
            l = forward(p, x, y) / MICRO
            l.backward()
            loss += l.item()
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP).item()
        lr = lr_at(s)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        print(json.dumps({"type": "step", "step": s, "loss": loss, "lr": lr, "grad_norm": norm,
                          "step_seconds": time.perf_counter() - t0}), flush=True)
        if s % EVAL_EVERY == 0 or s == STEPS:
            with torch.no_grad():
                losses = [forward(p, *samples(val, range(j * B, j * B + B))).item()
                          for j in range(EVAL_BATCHES)]
            print(json.dumps({"type": "eval", "step": s, "loss": sum(losses) / len(losses)}),
                  flush=True)


def read_run(path):
    steps, evals = {}, {}
    for line in open(path):
        if line.startswith('{"type":"step"') or line.startswith('{"type": "step"'):
            d = json.loads(line)
            steps[d["step"]] = d
        elif line.startswith('{"type":"eval"') or line.startswith('{"type": "eval"'):
            d = json.loads(line)
            evals[d["step"]] = d["loss"]
    return steps, evals


def rel(a, b):
    return abs(a - b) / abs(b) if b else abs(a - b)


def compare(weft_path, torch_path, png, csv_path, tol, weft_secs, torch_secs):
    ws, we = read_run(weft_path)
    ts, te = read_run(torch_path)
    ok = True
    if sorted(ws) != sorted(ts) or sorted(we) != sorted(te) or not we:
        print(f"the runs differ in shape: weft {len(ws)} steps, evals after {sorted(we)}; "
              f"pytorch {len(ts)} steps, evals after {sorted(te)}")
        ok = False
    steps = sorted(set(ws) & set(ts))
    lr_diff = max((rel(ts[s]["lr"], ws[s]["lr"]) for s in steps), default=0.0)
    if lr_diff > 1e-9:  # the schedule is the same formula: only a spec that drifted differs
        print(f"the learning rates differ (max relative {lr_diff:.2e}): does "
              "examples/gpt2_recipe.yaml still match bench/recipe_torch.py's constants?")
        ok = False

    print("held-out (eval) loss after each evaluation:")
    print(f"{'step':>5} {'weft':>10} {'pytorch':>10} {'rel diff':>10}")
    worst = (0.0, None)
    for s in sorted(set(we) & set(te)):
        r = rel(we[s], te[s])
        worst = max(worst, (r, s))
        flag = "  > tolerance" if r > tol else ""
        print(f"{s:>5} {we[s]:>10.6f} {te[s]:>10.6f} {r:>10.2e}{flag}")
    print()
    print("training loss, grad norm (before clipping) and lr at some steps:")
    print(f"{'step':>5} {'weft loss':>10} {'torch loss':>10} {'rel diff':>9}  "
          f"{'weft norm':>10} {'torch norm':>10} {'rel diff':>9}  {'lr':>9}")
    for s in [1, 2, 3, 5, 10, 30, 100, 200, 300]:
        if s in ws and s in ts:
            a, b = ws[s], ts[s]
            print(f"{s:>5} {a['loss']:>10.6f} {b['loss']:>10.6f} {rel(a['loss'], b['loss']):>9.2e}  "
                  f"{a['grad_norm']:>10.6f} {b['grad_norm']:>10.6f} "
                  f"{rel(a['grad_norm'], b['grad_norm']):>9.2e}  {a['lr']:>9.3e}")
    first = [s for s in steps if s <= 10]
    print()
    print("largest relative difference, training loss: steps 1-10 %.2e, all steps %.2e; grad norm: "
          "steps 1-10 %.2e; lr: %.2e" % (
              max((rel(ws[s]["loss"], ts[s]["loss"]) for s in first), default=0),
              max((rel(ws[s]["loss"], ts[s]["loss"]) for s in steps), default=0),
              max((rel(ws[s]["grad_norm"], ts[s]["grad_norm"]) for s in first), default=0),
              lr_diff))
    print("largest relative difference of the eval loss: %.2e (after step %s); tolerance %.0e"
          % (worst[0], worst[1], tol))
    if weft_secs and torch_secs:
        med = lambda run: statistics.median(run[s]["step_seconds"] for s in steps)
        print(f"wall time: weft {float(weft_secs):.1f} s (2 ranks, the daemons' start and planning "
              f"included), pytorch {float(torch_secs):.1f} s (1 process); median step: weft "
              f"{med(ws):.4f} s, pytorch {med(ts):.4f} s: recorded, not a speed comparison")

    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "weft_loss", "torch_loss", "weft_grad_norm", "torch_grad_norm",
                    "weft_lr", "torch_lr", "weft_eval_loss", "torch_eval_loss"])
        for s in steps:
            w.writerow([s, repr(ws[s]["loss"]), repr(ts[s]["loss"]), repr(ws[s]["grad_norm"]),
                        repr(ts[s]["grad_norm"]), repr(ws[s]["lr"]), repr(ts[s]["lr"]),
                        repr(we[s]) if s in we else "", repr(te[s]) if s in te else ""])

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    ax.plot(steps, [ws[s]["loss"] for s in steps], color="tab:blue", alpha=0.3, lw=1,
            label="Weft, training loss")
    ax.plot(steps, [ts[s]["loss"] for s in steps], color="tab:orange", alpha=0.3, lw=1,
            label="PyTorch, training loss")
    es = sorted(set(we) & set(te))
    ax.plot(es, [we[s] for s in es], color="tab:blue", marker="o", lw=2, label="Weft, eval loss")
    ax.plot(es, [te[s] for s in es], color="tab:orange", marker="x", ms=9, lw=2, ls="--",
            label="PyTorch, eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("mean token cross-entropy (nats)")
    ax.set_title("examples/gpt2_recipe.yaml: Weft (dp = 2) vs PyTorch %s (CPU, float32)\n"
                 "same init, data and recipe; eval losses within %.2e relative"
                 % (torch.__version__.split("+")[0], worst[0]), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    print(f"wrote {png} and {csv_path}")
    if worst[0] > tol:
        print(f"FAIL: the eval losses differ by {worst[0]:.2e} after step {worst[1]}, "
              f"more than {tol:.0e}")
        ok = False
    return 0 if ok else 1


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "init" and len(sys.argv) in (3, 4):
        init(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1234)
    elif mode == "train" and len(sys.argv) == 6:
        train(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "compare" and len(sys.argv) in (7, 9):
        sys.exit(compare(*sys.argv[2:6], float(sys.argv[6]), *(sys.argv[7:9] or [None, None])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
