#!/usr/bin/env python3
"""Idle fraction per rank of a pipelined run, read off its Chrome trace (weftctl local --trace),
next to the theoretical bubble and the planner's peak activation memory (weftctl plan --json).

Used by bench/pipeline_bubble.sh; the standard library only.

  pipeline_bubble.py header
  pipeline_bubble.py row SCHEDULE PP M V TRACE STEPS_JSONL PLAN_JSON REF1_JSON REF2_JSON CPU_JSON
                         [SKIP]
  pipeline_bubble.py p2p LABEL TRACE STEPS_JSONL [SKIP]
  pipeline_bubble.py run CPU_JSON CMD...   (runs CMD; CPU_JSON: other_cores, the CPU the rest of
                                            the machine used meanwhile, in cores)
  pipeline_bubble.py other CPU_JSON

Steps: the trace has no step field, but a rank's executor emits exactly one span per span
template per step, in program order (worker/executor/executor.cc RunTraced), so a rank's spans
cut into equal runs of len(spans) / steps, in the order the trace lists them, are its steps.

For each measured step (the first SKIP dropped, default 2):
  window   = earliest span start to latest span end of that step over all ranks
  busy(r)  = sum of rank r's compute spans (forward, backward, optimizer, data, compute)
  idle(r)  = 1 - busy(r) / window, averaged over the measured steps.
  pipe idle: the same with only the pipeline part, forward/backward/data spans, over the window
  from the first such span to the last one (the optimizer step, the loss all-reduce and the
  step's set-up left out): what (p-1)/(m+p-1) models.
Theory: FThenB and 1F1B (p-1)/(m+p-1); VPP with v chunks per rank ((p-1)/v)/(m+(p-1)/v).
Memory: ranks[].memory.peak_activation_bytes of the spec's plan (act MiB), and how many
micro-batches' activations that is (~mb): REF1_JSON / REF2_JSON are the plans of the same stages
running FThenB over 1 and 2 micro-batches of the same size, so one micro-batch's stored
activations are ref2 - ref1 and the rest of ref1 is transient; ~mb = 1 + (peak - ref1) /
(ref2 - ref1).
Also printed: step (median step_seconds of the measured steps, slowest rank), window (mean step
window), busy (the rank's compute spans per step) and p2p (its send + recv spans per step:
Gloo's send completes only once the peer has posted the matching recv, so a send's time
includes waiting for the receiver); other (CPU_JSON, written by `run`: the CPU the rest of the
machine used during the run, in cores; 0 on an idle machine).
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

BUSY = {"forward", "backward", "optimizer", "data", "compute"}
PIPE = {"forward", "backward", "data"}


def theory(schedule, p, m, v):
    if schedule == "VPP":
        w = (p - 1) / v
        return w / (m + w)
    return (p - 1) / (m + p - 1)


def steps_of(trace_path, n_steps):
    """{rank: [[span, ...] per step]} with span = (cat, start_us, end_us)."""
    doc = json.load(open(trace_path))
    per_rank = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        per_rank.setdefault(e["pid"], []).append((e["cat"], e["ts"], e["ts"] + e["dur"], e["name"]))
    out = {}
    for rank, spans in per_rank.items():
        if len(spans) % n_steps:
            sys.exit("rank %d: %d spans is not a multiple of %d steps" % (rank, len(spans), n_steps))
        k = len(spans) // n_steps
        steps = [spans[i * k:(i + 1) * k] for i in range(n_steps)]
        for s in steps:  # every step has the same span names in the same order
            if [x[3] for x in s] != [x[3] for x in steps[0]]:
                sys.exit("rank %d: steps do not repeat the same spans" % rank)
            if any(b[1] < a[1] for a, b in zip(s, s[1:])):
                sys.exit("rank %d: spans of a step go backwards" % rank)
        if any(b[0][1] < a[-1][2] for a, b in zip(steps, steps[1:])):
            sys.exit("rank %d: a step starts before the previous one ends" % rank)
        out[rank] = [[x[:3] for x in s] for s in steps]
    return out


def idle(steps, cats, skip):
    """({rank: mean idle fraction}, mean window us, {rank: mean busy us}) over measured steps."""
    ranks = sorted(steps)
    n = len(steps[ranks[0]])
    frac = {r: [] for r in ranks}
    busy = {r: [] for r in ranks}
    windows = []
    for s in range(skip, n):
        sel = {r: [x for x in steps[r][s] if x[0] in cats] for r in ranks}
        every = [x for r in ranks for x in sel[r]]
        lo = min(x[1] for x in every)
        hi = max(x[2] for x in every)
        windows.append(hi - lo)
        for r in ranks:
            b = sum(x[2] - x[1] for x in sel[r])
            busy[r].append(b)
            frac[r].append(1.0 - b / (hi - lo))
    mean = lambda d: {r: statistics.mean(v) for r, v in d.items()}
    return mean(frac), statistics.mean(windows), mean(busy)


def header():
    print("%-3s %-6s %2s %2s %4s %7s %7s %6s %6s %6s %6s %6s %7s %5s %6s" % (
        "pp", "sched", "m", "v", "rank", "step", "window", "busy", "p2p", "idle", "pipe",
        "theory", "act", "~mb", "other"))
    print("%-3s %-6s %2s %2s %4s %7s %7s %6s %6s %6s %6s %6s %7s %5s %6s" % (
        "", "", "", "", "", "ms", "ms", "ms", "ms", "", "idle", "bubble", "MiB", "", "cores"))


def peaks(plan):
    return {r["rank"]: r["memory"]["peak_activation_bytes"] for r in json.load(open(plan))["ranks"]}


def row(schedule, p, m, v, trace, jsonl, plan, ref1, ref2, cpu, skip=2):
    p, m, v, skip = int(p), int(m), int(v), int(skip)
    step_lines = [json.loads(l) for l in open(jsonl) if l.startswith('{"type":"step"')]
    n_steps = len(step_lines)
    step_ms = statistics.median(x["step_seconds"] for x in step_lines[skip:]) * 1e3
    steps = steps_of(trace, n_steps)
    all_idle, window, busy = idle(steps, BUSY, skip)
    pipe_idle, _, _ = idle(steps, PIPE, skip)
    _, _, p2p = idle(steps, {"send", "recv"}, skip)
    peak, one, two = peaks(plan), peaks(ref1), peaks(ref2)
    th = theory(schedule, p, m, v)
    other = json.load(open(cpu))["other_cores"]
    for r in sorted(steps):
        # One micro-batch more costs two - one; what is left of one is the transient part.
        mbs = 1 + (peak[r] - one[r]) / (two[r] - one[r])
        print("%-3d %-6s %2d %2d %4d %7s %7s %6.1f %6.1f %6.3f %6.3f %6.3f %7.2f %5.1f %6s" % (
            p, schedule, m, v, r, "%.1f" % step_ms if r == 0 else "",
            "%.1f" % (window / 1e3) if r == 0 else "", busy[r] / 1e3, p2p[r] / 1e3,
            all_idle[r], pipe_idle[r], th, peak[r] / 2**20, mbs,
            "%.2f" % other if r == 0 else ""))
        sys.stdout.flush()


def machine_busy_seconds():
    """CPU seconds spent outside idle and iowait by all cores since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return (sum(cpu) - cpu[3] - cpu[4]) / os.sysconf("SC_CLK_TCK")


def run(cpu_json, *cmd):
    """Runs CMD (stdout and stderr passed through) and writes to CPU_JSON how much CPU the rest of
    the machine used meanwhile, in cores: (all CPU time - CMD's and its reaped children's) / wall.
    weftctl local reaps its coordinator and workers, so their time counts as CMD's."""
    before_own = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_all, t0 = machine_busy_seconds(), time.monotonic()
    rc = subprocess.call(cmd)
    after_all, wall = machine_busy_seconds(), time.monotonic() - t0
    after_own = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after_own.ru_utime - before_own.ru_utime) + (after_own.ru_stime - before_own.ru_stime)
    other = max(0.0, (after_all - before_all) - own) / wall
    json.dump({"wall_seconds": wall, "own_cpu_seconds": own, "other_cores": other},
              open(cpu_json, "w"))
    return rc


def p2p(label, trace, jsonl, skip=2):
    """One line: the median send and recv span and the median step of a run, measured steps."""
    skip = int(skip)
    step_lines = [json.loads(l) for l in open(jsonl) if l.startswith('{"type":"step"')]
    steps = steps_of(trace, len(step_lines))
    dur = {"send": [], "recv": [], "forward": [], "backward": []}
    for r in steps:
        for s in steps[r][skip:]:
            for cat, lo, hi in s:
                if cat in dur:
                    dur[cat].append(hi - lo)
    med = {k: statistics.median(v) / 1e3 for k, v in dur.items()}
    print("%s: median send %.2f ms, recv %.2f ms (%d of each), forward %.2f ms, backward %.2f ms; "
          "median step %.1f ms" % (label, med["send"], med["recv"], len(dur["send"]),
                                   med["forward"], med["backward"],
                                   statistics.median(x["step_seconds"] for x in step_lines[skip:]) * 1e3))


if __name__ == "__main__":
    if sys.argv[1:2] == ["header"]:
        header()
    elif sys.argv[1:2] == ["run"] and len(sys.argv) > 3:
        sys.exit(run(*sys.argv[2:]))
    elif sys.argv[1:2] == ["other"] and len(sys.argv) == 3:
        print("%.2f" % json.load(open(sys.argv[2]))["other_cores"])
    elif sys.argv[1:2] == ["p2p"] and len(sys.argv) in (5, 6):
        p2p(*sys.argv[2:])
    elif sys.argv[1:2] == ["row"] and len(sys.argv) in (12, 13):
        row(*sys.argv[2:])
    else:
        sys.exit(__doc__)
