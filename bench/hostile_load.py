"""The client side of bench/hostile_load.sh: waits until a job reaches a step, then (with --flood)
opens idle TCP connections to the coordinator's gRPC port, reflection streams that never end and
slow HTTP requests to its metrics port, all at once and held until the job ends; meanwhile times
`weftctl list`, `weftctl submit` and a metrics scrape, and samples the coordinator's RSS, threads
and CPU. Prints one JSON object. Everything it dials is on 127.0.0.1.

Usage: /usr/bin/python3 bench/hostile_load.py --weftctl BIN --grpc_port P --metrics_port M
         --coordinator_pid PID --worker_pid PID --events FILE --tiny_spec SPEC [--flood] [--idle N]
         [--reflection N] [--reflection_channels N] [--slow_http N] [--start_step S] [--reps R]
  FILE: the job's `weftctl submit --watch --json` output as `stamp` writes it, being written;
  SPEC: the small job each timed submit sends.
       ... | /usr/bin/python3 bench/hostile_load.py stamp > FILE
  Each line of stdin prefixed with the time it arrived (CLOCK_MONOTONIC, seconds), then "eof":
  a process of its own, so that the times do not wait on the flood's event loop.
"""
import argparse
import asyncio
import heapq
import json
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

import grpc

from pipeline_bubble import machine_busy_seconds

REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
LIST_SERVICES = b"\x3a\x01*"  # ServerReflectionRequest{list_services: "*"}
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def raise_open_file_limit():
    """The soft open-file limit raised to the hard one; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def proc_sample(pid):
    """(VmRSS in MiB, threads, CPU seconds) of process pid."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return rss, threads, cpu


def stamp():
    for line in sys.stdin:
        sys.stdout.write("%.4f %s" % (time.monotonic(), line))
        sys.stdout.flush()
    sys.stdout.write("%.4f eof\n" % time.monotonic())


class JobEvents:
    """Follows the job's events file (written by `stamp`): each step with the time its event
    arrived, and the final state."""

    def __init__(self, path):
        self.path = path
        self.steps = []  # (step, step_seconds, arrival monotonic, loss)
        self.state = None
        self.job_id = None
        self.ended = False  # the watch's output ended
        self._offset = 0
        self._partial = ""

    def done(self):
        return self.state in TERMINAL or self.ended

    def poll(self):
        with open(self.path) as f:
            f.seek(self._offset)
            data = f.read()
            self._offset = f.tell()
        lines = (self._partial + data).split("\n")
        self._partial = lines.pop()
        for line in lines:
            when, _, text = line.partition(" ")
            if text == "eof":
                self.ended = True
            if not text.startswith("{"):
                continue
            e = json.loads(text)
            if e["type"] == "step":
                self.steps.append((e["step"], e["step_seconds"], float(when), e["loss"]))
            elif e["type"] == "state":
                self.state = e["state"]
            elif e["type"] == "submitted":
                self.job_id = e["job_id"]

    async def follow(self):
        """Polls the file every 20 ms until the watch ends."""
        while not self.ended:
            self.poll()
            await asyncio.sleep(0.02)

    async def until(self, done, timeout):
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                raise TimeoutError(f"waiting on {self.path}: at step "
                                   f"{self.steps[-1][0] if self.steps else 0}, state {self.state}")
            await asyncio.sleep(0.02)


def connect_all(port, count, first=b""):
    """Blocking connects to 127.0.0.1:port (each with 5 s), `first` sent on each; the sockets
    that connected, non-blocking, with when each sent last, and how many failed. Run in a
    thread: plain syscalls are far cheaper than a coroutine per socket, and the flood client
    shares the machine's 2 cores."""
    socks, failed = [], 0
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            if first:
                s.sendall(first)
        except OSError:
            s.close()
            failed += 1
            continue
        s.setblocking(False)
        socks.append((s, time.monotonic()))
    return socks, failed


class HeldConnections:
    """TCP connections held open; notes when the server closes each (whatever it sends first,
    gRPC's settings frame or an HTTP error, is read and dropped)."""

    def __init__(self, port, count, first=b""):
        self.port, self.count, self.first = port, count, first
        self.socks, self.closed_at, self.failed = [], {}, 0
        self.last_sent = {}  # socket -> when it last sent a byte
        self.silence_at_close = []  # seconds since each closed one last sent

    async def open(self):
        loop = asyncio.get_running_loop()
        opened, self.failed = await loop.run_in_executor(
            None, connect_all, self.port, self.count, self.first)
        self.socks = [s for s, _ in opened]
        self.last_sent = dict(opened)
        for s in self.socks:
            loop.add_reader(s.fileno(), self._readable, s)

    def _readable(self, s):
        try:
            if s.recv(65536):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        asyncio.get_running_loop().remove_reader(s.fileno())
        self.closed_at[s] = time.monotonic()
        self.silence_at_close.append(self.closed_at[s] - self.last_sent[s])

    def close(self):
        loop = asyncio.get_running_loop()
        for s in self.socks:
            if s not in self.closed_at:
                loop.remove_reader(s.fileno())
            s.close()


class IdleConnections(HeldConnections):
    """TCP connections that never send a byte."""


class SlowHttpRequests(HeldConnections):
    """GET /metrics requests that never end their headers: one more header byte every 2-4 s."""

    def __init__(self, port, count):
        super().__init__(port, count, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        self.random = random.Random(30)
        self.dripping = None

    async def open(self):
        await super().open()
        self.dripping = asyncio.ensure_future(self._drip())

    async def _drip(self):
        due = [(self.last_sent[s] + self.random.uniform(2, 4), i)
               for i, s in enumerate(self.socks)]
        heapq.heapify(due)
        while due:
            when, i = heapq.heappop(due)
            await asyncio.sleep(max(0, when - time.monotonic()))
            s = self.socks[i]
            if s in self.closed_at:
                continue
            try:
                s.send(b"a")
                self.last_sent[s] = time.monotonic()
            except BlockingIOError:
                pass
            except OSError:
                continue  # the reader notes the close
            heapq.heappush(due, (time.monotonic() + self.random.uniform(2, 4), i))

    def close(self):
        if self.dripping:
            self.dripping.cancel()
        super().close()


class ReflectionStreams:
    """Reflection streams, spread over channels (one TCP connection each), each sending one
    list_services request and then nothing, never closing its side."""

    def __init__(self, port, count, channels):
        self.port, self.count = port, count
        self.channels = [
            grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                      options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(min(channels, count))]
        self.calls = []
        self.outcome = {}  # "answered", "refused (CANCELLED)", "no reply in 30 s", other codes

    async def open(self):
        async def one(i):
            ch = self.channels[i % len(self.channels)]
            call = ch.stream_stream(REFLECTION, request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)()
            self.calls.append(call)
            try:
                await asyncio.wait_for(call.write(LIST_SERVICES), 30)
                reply = await asyncio.wait_for(call.read(), 30)
                if reply is grpc.aio.EOF:
                    kind = "ended: " + (await call.code()).name
                else:
                    kind = "answered"
            except asyncio.TimeoutError:
                kind = "no reply in 30 s"
            except grpc.aio.AioRpcError as e:
                kind = "refused (CANCELLED)" if e.code() == grpc.StatusCode.CANCELLED else \
                    "failed: " + e.code().name
            except (grpc.aio.UsageError, asyncio.InvalidStateError):  # ended before the write
                kind = "refused (" + (await call.code()).name + ")"
            self.outcome[kind] = self.outcome.get(kind, 0) + 1

        await asyncio.gather(*(one(i) for i in range(self.count)))

    def still_open(self):
        return sum(1 for c in self.calls if not c.done())

    async def close(self):
        # Each call cancelled first: grpc.aio's channel close leaves a stream with no read
        # pending open (1.51).
        for c in self.calls:
            c.cancel()
        await asyncio.sleep(0.5)
        for ch in self.channels:
            await ch.close()


def timed(argv):
    """(seconds, exit code, stdout, stderr) of a command. Blocking: the calls are timed on a
    thread of their own, so that a busy event loop does not add to them."""
    start = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    return time.monotonic() - start, p.returncode, p.stdout, p.stderr


def scrape(port):
    """(seconds, status code or 0, error text) of GET /metrics on a new connection."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            body = b""
            while chunk := s.recv(65536):
                body += chunk
        code = int(body.split(b" ", 2)[1]) if body.startswith(b"HTTP/1.1 ") else 0
        return time.monotonic() - start, code, ""
    except (OSError, ValueError) as e:
        return time.monotonic() - start, 0, repr(e)


def summary(xs):
    return {"median": statistics.median(xs), "max": max(xs), "n": len(xs)} if xs else None


def time_calls(ctl, a, start, until=None):
    """Rounds of `weftctl list`, `weftctl submit a.tiny_spec` and a scrape, one after another:
    a.reps of them, or with `until` as many as start before it is true (at least one).
    ({call: latency summary}, [what failed], [submitted job ids])."""
    lat = {"list": [], "submit": [], "scrape": []}
    failures, jobs = [], []
    rounds = 0
    while (rounds < a.reps) if until is None else (rounds == 0 or not until()):
        rounds += 1
        for call, argv in (("list", ["list"]), ("submit", ["submit", a.tiny_spec])):
            s, rc, o, e = timed(ctl + argv)
            lat[call].append(s)
            if rc != 0:
                failures.append(f"{call} at +{time.monotonic() - start:.1f} s: exit {rc}: "
                                f"{e.strip()}")
            elif call == "submit":
                jobs.append(o.strip())
        s, code, e = scrape(a.metrics_port)
        lat["scrape"].append(s)
        if code != 200:
            failures.append(f"scrape at +{time.monotonic() - start:.1f} s: {code} {e}")
    return {k: summary(v) for k, v in lat.items()}, failures, jobs


async def main(a):
    limit = raise_open_file_limit()
    needed = a.idle + a.slow_http + a.reflection_channels + 256 if a.flood else 0
    scale = 1.0
    if needed > limit:
        scale = (limit - 256) / (needed - 256)
        a.idle, a.slow_http = int(a.idle * scale), int(a.slow_http * scale)
        a.reflection_channels = max(1, int(a.reflection_channels * scale))
        print(f"open-file limit {limit}: the flood scaled down by {scale:.2f}", file=sys.stderr)
    out = {"flood": a.flood, "open_file_limit": limit, "scaled_by": scale,
           "idle": a.idle, "reflection": a.reflection, "reflection_channels": a.reflection_channels,
           "slow_http": a.slow_http}
    ctl = [a.weftctl, "--coordinator", f"127.0.0.1:{a.grpc_port}"]
    events = JobEvents(a.events)
    following = asyncio.ensure_future(events.follow())
    await events.until(lambda: events.done() or (
        events.steps and events.steps[-1][0] >= a.start_step), 300)
    if events.done():
        raise RuntimeError(f"the job ended ({events.state}) before step {a.start_step}")

    samples = []
    stop_sampling = asyncio.Event()

    async def sampler():
        while not stop_sampling.is_set():
            samples.append(proc_sample(a.coordinator_pid))
            try:
                await asyncio.wait_for(stop_sampling.wait(), 0.25)
            except asyncio.TimeoutError:
                pass

    rss0, threads0, cpu0 = proc_sample(a.coordinator_pid)
    worker0 = proc_sample(a.worker_pid)[2]
    own0 = resource.getrusage(resource.RUSAGE_SELF)
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = machine_busy_seconds()
    out["before"] = {"rss_mib": rss0, "threads": threads0}
    out["load_from_step"] = events.steps[-1][0]
    sampling = asyncio.ensure_future(sampler())
    start = time.monotonic()
    loop = asyncio.get_running_loop()
    idle = reflection = slow = None
    failures, tiny_jobs = [], []
    if a.flood:
        idle = IdleConnections(a.grpc_port, a.idle)
        reflection = ReflectionStreams(a.grpc_port, a.reflection, a.reflection_channels)
        slow = SlowHttpRequests(a.metrics_port, a.slow_http)
        opened = threading.Event()

        async def open_flood():
            await asyncio.gather(idle.open(), slow.open(), reflection.open())
            out["opened_in_s"] = time.monotonic() - start
            opened.set()

        # Calls from the first moment, as long as the flood is still opening; then more below.
        opening = asyncio.ensure_future(open_flood())
        out["latency_opening_s"], failed, jobs = await loop.run_in_executor(
            None, time_calls, ctl, a, start, opened.is_set)
        failures += failed
        tiny_jobs += jobs
        await opening
        out["idle_open_failed"] = idle.failed
        out["slow_http_open_failed"] = slow.failed
        out["reflection_outcome"] = reflection.outcome
        out["after_open"] = dict(zip(("rss_mib", "threads", "cpu"),
                                     proc_sample(a.coordinator_pid)))

    out["latency_s"], failed, jobs = await loop.run_in_executor(None, time_calls, ctl, a, start)
    out["failures"] = failures + failed
    tiny_jobs += jobs
    out["measured_in_s"] = time.monotonic() - start

    await events.until(events.done, 600)
    await following
    end = time.monotonic()
    out["job_state"] = events.state if events.state in TERMINAL else \
        f"not ended: the watch ended at state {events.state}"
    out["job_id"] = events.job_id
    out["flood_held_s"] = end - start
    if a.flood:
        out["idle_closed_by_server"] = len(idle.closed_at)
        out["idle_still_open"] = len(idle.socks) - len(idle.closed_at)
        if idle.closed_at:
            out["idle_closed_between_s"] = [min(idle.closed_at.values()) - start,
                                            max(idle.closed_at.values()) - start]
        out["reflection_still_open"] = reflection.still_open()
        out["slow_http_closed_by_server"] = len(slow.closed_at)
        out["slow_http_still_open"] = len(slow.socks) - len(slow.closed_at)
        if slow.silence_at_close:
            out["slow_http_silence_at_close_s"] = [min(slow.silence_at_close),
                                                   max(slow.silence_at_close)]
            out["slow_http_closed_between_s"] = [min(slow.closed_at.values()) - start,
                                                 max(slow.closed_at.values()) - start]
        idle.close()
        slow.close()
        await reflection.close()
    stop_sampling.set()
    await sampling
    rss1, threads1, cpu1 = proc_sample(a.coordinator_pid)
    worker1 = proc_sample(a.worker_pid)[2]
    own1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = lambda r: r.ru_utime + r.ru_stime
    client = cpu(own1) - cpu(own0)
    weftctl = cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - cpu(children0)
    # Everything else on the machine: other users' work, which the step times feel too.
    other = machine_busy_seconds() - busy0 - (cpu1 - cpu0) - (worker1 - worker0) - client - weftctl
    out["during"] = {"rss_mib_max": max(x[0] for x in samples),
                     "threads_max": max(x[1] for x in samples),
                     "coordinator_cpu_s": cpu1 - cpu0,
                     "worker_cpu_s": worker1 - worker0,
                     "client_cpu_s": client,
                     "weftctl_cpu_s": weftctl,
                     "other_cores": max(0.0, other) / (time.monotonic() - start)}
    out["after"] = {"rss_mib": rss1, "threads": threads1}
    # Every step: [step, step_seconds, when its event arrived in seconds from the load's start,
    # loss].
    out["steps"] = [[n, sec, round(t - start, 3), loss] for n, sec, t, loss in events.steps]

    # The small jobs submitted above wait behind the job; each must succeed.
    states = {}
    for job in tiny_jobs:
        _, rc, o, e = timed(ctl + ["watch", job])
        states[job] = "SUCCEEDED" if rc == 0 else ((o + e).strip().splitlines() or ["?"])[-1]
    out["tiny_jobs"] = states
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1:] == ["stamp"]:
        stamp()
        sys.exit()
    p = argparse.ArgumentParser()
    p.add_argument("--weftctl", required=True)
    p.add_argument("--grpc_port", type=int, required=True)
    p.add_argument("--metrics_port", type=int, required=True)
    p.add_argument("--coordinator_pid", type=int, required=True)
    p.add_argument("--worker_pid", type=int, required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--tiny_spec", required=True)
    p.add_argument("--flood", action="store_true")
    p.add_argument("--idle", type=int, default=5000)
    p.add_argument("--reflection", type=int, default=2000)
    p.add_argument("--reflection_channels", type=int, default=100)
    p.add_argument("--slow_http", type=int, default=1000)
    p.add_argument("--start_step", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    asyncio.run(main(p.parse_args()))
