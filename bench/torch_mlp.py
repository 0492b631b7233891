"""The seed's MLP training step in PyTorch (CPU), for bench/mlp_step.sh to compare against.

Same model and math as bench/mlp_step.yaml: 1024 -> 4096 -> relu -> 1024, no bias, MSE (mean),
AdamW, float32, global batch 512. Prints one JSON line with the median step time.
"""
import json
import statistics
import sys
import time

import torch


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    warmup = 5
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 1024, bias=False),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    x = torch.rand(512, 1024) * 2 - 1
    y = torch.rand(512, 1024) * 2 - 1
    times = []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    times = times[warmup:]
    print(json.dumps({"framework": "pytorch " + torch.__version__, "threads": threads,
                      "median_step_seconds": statistics.median(times),
                      "min_step_seconds": min(times)}))


if __name__ == "__main__":
    main()
