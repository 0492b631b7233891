"""bench/auto_search.sh's helper. `specs BASE.yaml SEARCH.json DIR SPACE`: one spec per strategy
the search ranked (DIR/<index>.yaml: BASE with the strategy's keys, its own placements dropped),
listed on stdout as `index label predicted_s tail_s planned_peak_bytes`; SPACE `norecompute` keeps
only the strategies without recompute. `report ROWS.tsv PNG`: per model and link, the MAPE of
the predicted step, Kendall's tau of predicted against measured order, the top-1 regret and the
peaks planned = measured; and the predicted-against-measured plot."""
import json
import os
import sys

import yaml


def merge_strategy(base, keys):
    spec = dict(base)
    spec["mesh"] = keys["mesh"]
    data = dict(spec["data"])
    data["placements"] = keys.get("data", {}).get("placements", {}) or {}
    spec["data"] = data
    for key in ("parallelize", "pipeline", "sharding"):
        spec.pop(key, None)
        if key in keys:
            spec[key] = keys[key]
    model = dict(spec["model"])
    model.pop("recompute", None)
    if "layers" in model:  # placements belong to the strategy
        model["layers"] = [{k: v for k, v in l.items() if k not in ("placements", "stage")}
                           for l in model["layers"]]
    model.pop("placements", None)
    if "recompute" in keys.get("model", {}):
        model["recompute"] = keys["model"]["recompute"]
    spec["model"] = model
    train = dict(spec["train"])
    train.pop("micro_batches", None)
    if "train" in keys:
        train.update(keys["train"])
    spec["train"] = train
    return spec


def specs(base_path, search_path, out_dir, space):
    base = yaml.safe_load(open(base_path))
    search = json.load(open(search_path))
    os.makedirs(out_dir, exist_ok=True)
    for index, c in enumerate(search["ranked"]):
        if space == "norecompute" and "recompute" in c["strategy"]:
            continue
        spec = merge_strategy(base, yaml.safe_load(c["spec_keys"]))
        spec["name"] = "%s_%d" % (base["name"], index)
        with open(os.path.join(out_dir, "%d.yaml" % index), "w") as f:
            yaml.safe_dump(spec, f, sort_keys=False)
        p = c["predicted"]
        print("%d\t%s\t%.6f\t%.6f\t%d" % (index, c["strategy"], p["step_s"], p["tail_step_s"],
                                          c["peak_bytes"]))


def kendall_tau(xs, ys):
    concordant = discordant = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            s = (xs[i] - xs[j]) * (ys[i] - ys[j])
            concordant += s > 0
            discordant += s < 0
    pairs = len(xs) * (len(xs) - 1) / 2
    return (concordant - discordant) / pairs if pairs else float("nan")


def report(rows_path, png):
    groups = {}
    for line in open(rows_path):
        model, link, index, label, pred, tail, meas, planned, peak = line.rstrip("\n").split("\t")
        if meas == "-":
            print("not measured (the job failed): %s %s Mbit/s %s" % (model, link, label))
            continue
        groups.setdefault((model, link), []).append(
            (int(index), label, float(pred), float(tail), float(meas), planned, peak))
    print("%-6s %-9s %5s %7s %6s %7s %9s  %s" % ("model", "link", "plans", "MAPE", "tau",
                                                "regret", "peak=", "pick (predicted, measured) / best measured"))
    for (model, link), rs in sorted(groups.items()):
        pred = [r[2] for r in rs]
        meas = [r[4] for r in rs]
        mape = sum(abs(p - m) / m for p, m in zip(pred, meas)) / len(rs)
        tau = kendall_tau(pred, meas)
        pick = min(rs, key=lambda r: (r[2], r[0]))
        best = min(rs, key=lambda r: r[4])
        regret = pick[4] / best[4] - 1
        exact = sum(r[5] == r[6] for r in rs)
        print("%-6s %-9s %5d %6.1f%% %6.2f %6.1f%% %4d/%-4d  %s (%.4f, %.4f s) / %s (%.4f s)" % (
            model, "unshaped" if link == "0" else link + "Mbit", len(rs), 100 * mape, tau,
            100 * regret, exact, len(rs), pick[1], pick[2], pick[4], best[1], best[4]))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot (tools/setup.sh --bench installs it)")
        return
    links = sorted({k[1] for k in groups}, key=lambda l: -int(l))
    fig, axes = plt.subplots(1, len(links), figsize=(6 * len(links), 5.5), squeeze=False)
    for ax, link in zip(axes[0], links):
        top, bottom = 0, float("inf")
        for (model, l), rs in sorted(groups.items()):
            if l != link:
                continue
            ax.scatter([r[4] * 1e3 for r in rs], [r[2] * 1e3 for r in rs], s=14, label=model)
            top = max(top, max(max(r[4], r[2]) for r in rs) * 1e3)
            bottom = min(bottom, min(min(r[4], r[2]) for r in rs) * 1e3)
        ax.plot([bottom, top], [bottom, top], color="gray", linewidth=0.8, label="predicted = measured")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured step (ms)")
        ax.set_ylabel("predicted step (ms)")
        ax.set_title("4 ranks, 2 hosts x 2: link %s" % ("unshaped" if link == "0" else link + " Mbit/s"))
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print("plot: %s" % png)


if __name__ == "__main__":
    if sys.argv[1] == "specs":
        specs(*sys.argv[2:6])
    else:
        report(*sys.argv[2:4])
