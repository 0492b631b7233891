#!/usr/bin/env python3
"""Writes a Weft cost profile (proto/weft/v1/profile.proto, JSON) of an H100 SXM5 cluster from
published figures, for `weftctl plan --auto --profile` on paper (bench/plan_auto_scale.sh).
Nothing here was measured by Weft; each figure names where it comes from.

  /usr/bin/python3 bench/h100_profile.py > h100.json

Compute (one H100 SXM5 80GB):
  - peak_flops 989.4e12: dense BF16 tensor-core peak (NVIDIA H100 datasheet).
  - MATMUL under `precision: bf16`: 700e12 flop/s on large GEMMs (about 71% of peak, what cuBLAS
    reaches on the square bf16 GEMMs of Megatron-sized layers in NVIDIA's published
    Transformer Engine / cuBLAS benchmarks), 6 us a call.
  - MATMUL in f32 without TF32: 51e12 flop/s (67 TFLOPS FP32 peak, at 76%); bf16 storage alone
    widens to f32 and runs at that rate.
  - ATTENTION: 350e12 flop/s (FlashAttention-2's published H100 forward figure, bf16).
  - MEMORY ops: 2.8e12 B/s (HBM3's 3.35 TB/s peak at 84%), 4 us a call (a kernel launch).
  - instruction_overhead_s 4e-6: a launch and the executor's bookkeeping.
Links (DGX H100: 8 GPUs on NVLink 4 through NVSwitch; 8 x 400 Gb/s ConnectX-7 per node):
  - inside a host: NCCL all-reduce bus bandwidth about 450 GB/s on 8 GPUs (nccl-tests figures
    NVIDIA publishes for DGX H100), so a byte a rank sends costs 1/450e9 s; 8 us + 2 us per ring
    step. SEND (peer-to-peer over NVLink): 350 GB/s.
  - across hosts: 400 Gb/s per GPU = 50 GB/s, NCCL reaching about 45 GB/s of bus bandwidth at
    scale; 15 us + 5 us per ring step. SEND: 45 GB/s.
  - overlap_slowdown 1.1: compute beside NCCL kernels loses SMs (NCCL takes 16-32 of 132).
"""
import json
import sys

GROUPS = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def fit(alpha, per_unit, tail=1.05):
    return {"alphaS": alpha, "perUnitS": per_unit, "tailRatio": tail, "samples": 0}


def main():
    kernels = [
        {"kind": "MATMUL", "dtype": "F32", "fit": fit(6e-6, 1 / 51e12)},
        {"kind": "MATMUL", "dtype": "F32", "precision": "bf16", "fit": fit(6e-6, 1 / 700e12)},
        {"kind": "MATMUL", "dtype": "BF16", "fit": fit(6e-6, 1 / 51e12)},
        {"kind": "ATTENTION", "dtype": "F32", "fit": fit(8e-6, 1 / 350e12)},
        {"kind": "MEMORY", "dtype": "F32", "fit": fit(4e-6, 1 / 2.8e12)},
        {"kind": "MEMORY", "dtype": "BF16", "fit": fit(4e-6, 1 / 2.8e12)},
    ]
    links = []
    for op in ["ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"]:
        for k in GROUPS:
            if k <= 8:
                links.append({"op": op, "groupSize": k, "scope": "INTRA_HOST",
                              "fit": fit(8e-6 + 2e-6 * (k - 1), 1 / 450e9)})
            links.append({"op": op, "groupSize": k, "scope": "INTER_HOST",
                          "fit": fit(15e-6 + 5e-6 * (k - 1), 1 / 45e9)})
    links.append({"op": "SEND", "groupSize": 2, "scope": "INTRA_HOST", "fit": fit(8e-6, 1 / 350e9)})
    links.append({"op": "SEND", "groupSize": 2, "scope": "INTER_HOST", "fit": fit(15e-6, 1 / 45e9)})
    profile = {
        "kind": "cuda",
        "host": "",
        "device": "NVIDIA H100 SXM5 80GB (published figures, not measured)",
        "kernels": kernels,
        "links": links,
        "overlapSlowdown": 1.1,
        "peakFlops": 989.4e12,
        "memoryBytes": str(80 * 1024**3),
        "instructionOverheadS": 4e-6,
    }
    json.dump(profile, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
