"""The GPT-2 training step of bench/gpt_step.sh in Debian's PyTorch (CPU), to compare Weft with.

Same math as Weft's `arch: gpt2` (Hugging Face's GPT2LMHeadModel): token + learned position
embeddings, pre-LayerNorm blocks, causal attention scaled by 1/sqrt(head_dim), MLP
c_proj(gelu_tanh(c_fc(x))) with 4x width, ln_f, logits = x @ wte^T (tied), mean token
cross-entropy, AdamW, dropout 0, float32. Batches come from the same llm.c token file the same
way (sample i = tokens[i*T : i*T+T+1], step s reads samples (s-1)*B .. s*B-1).

Modes:
  single  one process.
  ddp     2 processes, DistributedDataParallel over gloo; each rank reads B/2 samples.
  tp      2 processes, Megatron-style tensor parallelism over gloo, as Weft's `plan: megatron`:
          vocabulary-parallel wte (embedding and tied head) with a vocabulary-parallel
          cross-entropy that never gathers the logits, c_attn column-parallel by whole heads
          (each rank its heads of q, k and v), attn.c_proj and mlp.c_proj row-parallel with one
          all-reduce each forward, mlp.c_fc column-parallel, norms, wpe and the row-parallel
          biases replicated. Each rank reads the whole batch.
Every rank uses `threads` intra-op threads. A step is timed from reading the batch to the end of
optimizer.step() on every rank; the step's time is the slowest rank's (as Weft's step_seconds).
Prints one JSON line.

Usage: python3 gpt_step_torch.py MODE TOKENS.bin THREADS STEPS [WARMUP]
"""
import json
import math
import os
import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

V, NPOS, C, L, H, T, B = 8192, 256, 512, 4, 8, 256, 8
EPS = 1e-5


def load_tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520 and header[1] == 1, "not an llm.c token file"
    return np.memmap(path, dtype=np.uint16, mode="r", offset=1024, shape=(int(header[2]),))


def batch(tokens, step, first, count):
    """Rows first .. first+count-1 of step `step`'s batch (0-based step), as (inputs, targets)."""
    nsamples = (len(tokens) - 1) // T
    rows = [((step * B + first + r) % nsamples) for r in range(count)]
    buf = np.stack([tokens[i * T:i * T + T + 1] for i in rows]).astype(np.int64)
    buf = torch.from_numpy(buf)
    return buf[:, :T], buf[:, 1:]


# Megatron's conjugate operators: f is identity forward and all-reduce backward (entering a
# tensor-parallel region), g is all-reduce forward and identity backward (leaving one).
class CopyToTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class ReduceFromTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over logits split on the vocabulary (Megatron's): three all-reduces of
    [N] vectors (max, sum of exp, target logit), never the [N, V] logits."""

    @staticmethod
    def forward(ctx, logits, target, v_start):
        n, v_local = logits.shape
        lmax = logits.max(dim=1).values
        dist.all_reduce(lmax, op=dist.ReduceOp.MAX)
        shifted = logits - lmax.unsqueeze(1)
        local = target - v_start
        mine = (local >= 0) & (local < v_local)
        idx = torch.where(mine, local, torch.zeros_like(local))
        tlogit = shifted.gather(1, idx.unsqueeze(1)).squeeze(1) * mine
        dist.all_reduce(tlogit)
        exp = shifted.exp()
        sumexp = exp.sum(dim=1)
        dist.all_reduce(sumexp)
        loss = (sumexp.log() - tlogit).mean()
        exp.div_(sumexp.unsqueeze(1))
        ctx.save_for_backward(exp, idx, mine)
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, idx, mine = ctx.saved_tensors
        g = softmax
        g.scatter_add_(1, idx.unsqueeze(1), -mine.to(g.dtype).unsqueeze(1))
        g.mul_(grad / g.shape[0])
        return g, None, None


class Gpt2(torch.nn.Module):
    """tp = 1: the single-device model; tp = 2: this rank's shard of the Megatron layout."""

    def __init__(self, tp=1, rank=0):
        super().__init__()
        self.tp, self.rank = tp, rank
        self.vl, self.hl, self.fl = V // tp, H // tp, 4 * C // tp
        proj_std = 0.02 / math.sqrt(2 * L)
        p = lambda *shape, std=0.02: torch.nn.Parameter(torch.randn(*shape) * std)
        z = lambda *shape: torch.nn.Parameter(torch.zeros(*shape))
        o = lambda *shape: torch.nn.Parameter(torch.ones(*shape))
        self.wte, self.wpe = p(self.vl, C), p(NPOS, C)
        d = C // H
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            blk = torch.nn.Module()
            blk.ln1_w, blk.ln1_b = o(C), z(C)
            blk.attn_w, blk.attn_b = p(C, 3 * self.hl * d), z(3 * self.hl * d)
            blk.proj_w, blk.proj_b = p(self.hl * d, C, std=proj_std), z(C)
            blk.ln2_w, blk.ln2_b = o(C), z(C)
            blk.fc_w, blk.fc_b = p(C, self.fl), z(self.fl)
            blk.fc2_w, blk.fc2_b = p(self.fl, C, std=proj_std), z(C)
            self.blocks.append(blk)
        self.lnf_w, self.lnf_b = o(C), z(C)
        # A plain attribute, not a buffer: DDP would broadcast it, and gloo has no bool.
        self.mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    def enter(self, x):
        return CopyToTp.apply(x) if self.tp > 1 else x

    def leave(self, x):
        return ReduceFromTp.apply(x) if self.tp > 1 else x

    def forward(self, idx, targets):
        b, t = idx.shape
        d = C // H
        if self.tp > 1:
            v0 = self.rank * self.vl
            local = idx - v0
            mine = (local >= 0) & (local < self.vl)
            tok = F.embedding(torch.where(mine, local, torch.zeros_like(local)), self.wte)
            tok = self.leave(tok * mine.unsqueeze(-1))
        else:
            tok = F.embedding(idx, self.wte)
        x = tok + self.wpe[:t]
        for blk in self.blocks:
            a = self.enter(F.layer_norm(x, (C,), blk.ln1_w, blk.ln1_b, EPS))
            qkv = torch.addmm(blk.attn_b, a.view(b * t, C), blk.attn_w)
            q, k, v = qkv.view(b, t, 3, self.hl, d).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b * t, self.hl * d)
            x = x + (self.leave((y @ blk.proj_w).view(b, t, C)) + blk.proj_b)
            m = self.enter(F.layer_norm(x, (C,), blk.ln2_w, blk.ln2_b, EPS))
            f = F.gelu(torch.addmm(blk.fc_b, m.view(b * t, C), blk.fc_w), approximate="tanh")
            x = x + (self.leave((f @ blk.fc2_w).view(b, t, C)) + blk.fc2_b)
        x = self.enter(F.layer_norm(x, (C,), self.lnf_w, self.lnf_b, EPS))
        logits = x.view(b * t, C) @ self.wte.t()
        if self.tp > 1:
            return VocabParallelCrossEntropy.apply(logits, targets.reshape(-1), self.rank * self.vl)
        return F.cross_entropy(logits, targets.reshape(-1))


def shard(full, tp, rank):
    """This rank's tensor-parallel model holding its slices of `full`'s parameters, so that
    every mode starts from the same weights (and the same first loss)."""
    m = Gpt2(tp, rank)
    d = C // H
    cut = lambda w, axis, n: w.narrow(axis, rank * n, n)
    with torch.no_grad():
        m.wte.copy_(cut(full.wte, 0, m.vl))
        m.wpe.copy_(full.wpe)
        for fb, b in zip(full.blocks, m.blocks):
            for name in ("ln1_w", "ln1_b", "ln2_w", "ln2_b", "proj_b", "fc2_b"):
                getattr(b, name).copy_(getattr(fb, name))
            b.attn_w.copy_(cut(fb.attn_w.view(C, 3, H, d), 2, m.hl).reshape(C, -1))
            b.attn_b.copy_(cut(fb.attn_b.view(3, H, d), 1, m.hl).reshape(-1))
            b.proj_w.copy_(cut(fb.proj_w, 0, m.hl * d))
            b.fc_w.copy_(cut(fb.fc_w, 1, m.fl))
            b.fc_b.copy_(cut(fb.fc_b, 0, m.fl))
            b.fc2_w.copy_(cut(fb.fc2_w, 0, m.fl))
        m.lnf_w.copy_(full.lnf_w)
        m.lnf_b.copy_(full.lnf_b)
    return m


def run(rank, world, mode, path, threads, steps, warmup, port, out):
    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    torch.manual_seed(1234)
    tokens = load_tokens(path)
    model = Gpt2()
    if mode == "tp":
        model = shard(model, world, rank)
    train = model
    if mode == "ddp":
        train = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    first, count = (rank * B // world, B // world) if mode == "ddp" else (0, B)
    times, losses = [], []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        x, y = batch(tokens, step, first, count)
        opt.zero_grad(set_to_none=True)
        loss = train(x, y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    t = torch.tensor(times, dtype=torch.float64)
    losses = torch.tensor(losses, dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if mode == "ddp":  # each rank's loss is over its half of the batch
            dist.all_reduce(losses)
            losses /= world
        dist.destroy_process_group()
    if rank == 0:
        t = t.tolist()[warmup:]
        nparams = sum(p.numel() for p in model.parameters())
        with open(out, "w") as f:
            json.dump({"framework": "pytorch " + torch.__version__, "mode": mode, "ranks": world,
                       "threads": threads, "params_rank0": nparams,
                       "median_step_seconds": statistics.median(t), "min_step_seconds": min(t),
                       "tokens_per_second": B * T / statistics.median(t),
                       "first_loss": losses[0].item(), "last_loss": losses[-1].item()}, f)


def main():
    mode, path, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    out = path + "." + mode + ".json"
    if mode == "single":
        run(0, 1, mode, path, threads, steps, warmup, 0, out)
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(run, args=(2, mode, path, threads, steps, warmup, port, out),
                                    nprocs=2)
    with open(out) as f:
        print(f.read())


if __name__ == "__main__":
    main()
