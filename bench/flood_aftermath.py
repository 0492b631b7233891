"""The client side of bench/flood_aftermath.sh: what a coordinator keeps after connection floods,
and whether slow HTTP requests can hold its metrics server. Everything it dials is on 127.0.0.1.

1. FLOODS times: IDLE TCP connections to the gRPC port that never send a byte, held until the
   server closes them all (its 10 s handshake bound), then the coordinator's RSS sampled every
   second for SETTLE seconds (its memory release runs every 10 s).
2. SLOW GET /metrics requests that send one more header byte every 2-4 s (never silent for the
   5 s inactivity timeout) while a scrape is timed every second for WATCH seconds: when the server
   closed them, and the scrapes' latencies.

Usage: /usr/bin/python3 bench/flood_aftermath.py --grpc_port P --metrics_port M --pid PID
         [--floods 4] [--idle 5000] [--settle 15] [--slow 4200] [--watch 25]
Prints one JSON object.
"""
import argparse
import asyncio
import json
import time

from hostile_load import (IdleConnections, SlowHttpRequests, proc_sample, raise_open_file_limit,
                          scrape)


async def floods(a):
    out = []
    for i in range(a.floods):
        before = proc_sample(a.pid)[0]
        idle = IdleConnections(a.grpc_port, a.idle)
        start = time.monotonic()
        await idle.open()
        peak = proc_sample(a.pid)[0]
        while len(idle.closed_at) < len(idle.socks) and time.monotonic() - start < 60:
            await asyncio.sleep(0.1)
            peak = max(peak, proc_sample(a.pid)[0])
        closed = time.monotonic()
        idle.close()
        settled = []
        while time.monotonic() - closed < a.settle:
            await asyncio.sleep(1)
            settled.append(round(proc_sample(a.pid)[0], 1))
        out.append({"flood": i + 1, "rss_mib_before": round(before, 1),
                    "rss_mib_peak": round(peak, 1), "opened": len(idle.socks),
                    "failed": idle.failed, "closed_by_server": len(idle.closed_at),
                    "all_closed_after_s": round(closed - start, 1),
                    "rss_mib_each_second_after": settled})
    return out


async def slow(a):
    loop = asyncio.get_running_loop()
    requests = SlowHttpRequests(a.metrics_port, a.slow)
    start = time.monotonic()
    await requests.open()
    opened = time.monotonic() - start
    scrapes = []
    while time.monotonic() - start < a.watch:
        seconds, code, error = await loop.run_in_executor(None, scrape, a.metrics_port)
        scrapes.append({"at_s": round(time.monotonic() - start, 1), "ms": round(seconds * 1e3, 1),
                        "status": code, "error": error})
        await asyncio.sleep(1)
    closed = sorted(t - start for t in requests.closed_at.values())
    requests.close()
    return {"requests": len(requests.socks), "failed": requests.failed,
            "opened_in_s": round(opened, 1), "closed_by_server": len(closed),
            "first_closed_s": round(closed[0], 1) if closed else None,
            "last_closed_s": round(closed[-1], 1) if closed else None,
            "scrapes": scrapes}


async def main(a):
    return {"open_file_limit": raise_open_file_limit(), "floods": await floods(a),
            "slow_http": await slow(a)}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--grpc_port", type=int, required=True)
    p.add_argument("--metrics_port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--floods", type=int, default=4)
    p.add_argument("--idle", type=int, default=5000)
    p.add_argument("--settle", type=int, default=15)
    p.add_argument("--slow", type=int, default=4200)
    p.add_argument("--watch", type=int, default=25)
    print(json.dumps(asyncio.run(main(p.parse_args())), indent=1))
