"""docs/scaling.md's tables and plot from bench/scaling.py's JSON.

    python bench/scaling_report.py [--json bench/results/scaling.json] [--plot docs/scaling/memory_per_device.png]

Prints Markdown: the sizing table (per-device memory, FLOPs and collective bytes per step for every compiled case)
and the largest global batch that fits 16 / 32 / 80 GiB per chip for each model, mesh, sharding and layout —
interpolated between measured batches on a log-log line, never extrapolated past them ("< smallest" when the smallest
measured batch does not fit, "≥ largest" when the largest does). Writes the memory-against-batch plot.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPS_GIB = (16, 32, 80)
GIB = 2 ** 30


def series(rows):
    out = defaultdict(list)
    for r in rows:
        if "error" not in r:
            out[(r["model"], r["mesh"], r["sharding"], r["all_pairs"])].append(r)
    return {k: sorted(v, key=lambda r: r["batch"]) for k, v in out.items()}


def largest_fitting(points, cap_bytes):
    """Largest B with memory(B) <= cap on the log-log interpolation of the measured (B, memory) points."""
    b = [p["batch"] for p in points]
    m = [p["bytes_per_device"] for p in points]
    if m[0] > cap_bytes:
        return f"< {b[0]:,}"
    if m[-1] <= cap_bytes:
        return f"≥ {b[-1]:,}"
    for (b0, m0), (b1, m1) in zip(zip(b, m), zip(b[1:], m[1:])):
        if m0 <= cap_bytes < m1:
            slope = math.log(m1 / m0) / math.log(b1 / b0)
            return f"≈ {int(b0 * (cap_bytes / m0) ** (1 / slope)):,}"
    return "—"


def sizing_table(rows):
    lines = ["| model | mesh | sharding | all-pairs | global batch | GiB / device | GFLOP / device | all-reduce GiB | "
             "all-gather GiB | reduce-scatter GiB | other collectives GiB | compile s |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted((r for r in rows if "error" not in r),
                    key=lambda r: (r["model"], r["sharding"], r["all_pairs"], r["mesh"], r["batch"])):
        c = r["collective_bytes"]
        other = c["all-to-all"] + c["collective-permute"]
        lines.append(f"| {r['model']} | {r['mesh']} | {r['sharding']} | {r['all_pairs']} | {r['batch']:,} | "
                     f"{r['bytes_per_device'] / GIB:.2f} | {r['flops_per_device'] / 1e9:,.0f} | "
                     f"{c['all-reduce'] / GIB:.2f} | {c['all-gather'] / GIB:.2f} | {c['reduce-scatter'] / GIB:.2f} | "
                     f"{other / GIB:.2f} | {r['compile_s']:.0f} |")
    errors = [r for r in rows if "error" in r]
    for r in errors:
        lines.append(f"| {r['model']} | {r['mesh']} | {r['sharding']} | {r['all_pairs']} | {r['batch']:,} | "
                     f"did not compile: {r['error']} | | | | | | |")
    return "\n".join(lines)


def fit_table(rows):
    lines = ["| model | mesh | sharding | all-pairs | " + " | ".join(f"fits {c} GiB" for c in CAPS_GIB) + " |",
             "|---|---:|---|---|" + "---:|" * len(CAPS_GIB)]
    for (model, mesh, sharding, layout), pts in sorted(series(rows).items()):
        cells = [largest_fitting(pts, c * GIB) for c in CAPS_GIB]
        lines.append(f"| {model} | {mesh} | {sharding} | {layout} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = series(rows)
    panels = [("objective", "data_parallel", "MaxMatch objective alone (D = 1024, K = 4)"),
              ("maxmatch", "data_parallel", "MaxMatch step, data parallel (region + BERT-base)"),
              ("maxmatch", "fsdp", "MaxMatch step, FSDP (region + BERT-base)")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), sharey=True)
    colours = {8: "tab:blue", 64: "tab:orange", 256: "tab:green"}
    for ax, (model, sharding, title) in zip(axes, panels):
        for (m, mesh, sh, layout), pts in sorted(s.items()):
            if m != model or sh != sharding:
                continue
            ax.plot([p["batch"] for p in pts], [p["bytes_per_device"] / GIB for p in pts],
                    marker="o" if layout == "rows" else "s", linestyle="-" if layout == "rows" else "--",
                    color=colours.get(mesh, "gray"), label=f"{mesh} devices, {layout}")
        for cap in CAPS_GIB:
            ax.axhline(cap, color="gray", linewidth=0.8, linestyle=":")
            ax.text(1100, cap * 1.08, f"{cap} GiB", color="gray", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        batches = sorted({r["batch"] for r in rows if "error" not in r})
        ax.set_xticks(batches, [f"{b // 1024}K" if b >= 1024 else str(b) for b in batches])
        ax.minorticks_off()
        ax.set_xlabel("global batch (images per step; 5 captions each)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left")
        else:
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", color="gray")
    axes[0].set_ylabel("compiled memory per device (GiB, log scale)")
    fig.suptitle("Per-device memory of one training step against global batch "
                 "(dashed: all-pairs as one block tensor, XLA layout; solid: sharded by rows, chunked)", fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--json", nargs="+", default=sorted(glob.glob(os.path.join(REPO, "bench", "results",
                                                                             "scaling*.json"))))
    p.add_argument("--plot", default=os.path.join(REPO, "docs", "scaling", "memory_per_device.png"))
    a = p.parse_args(argv)
    rows = []
    for path in a.json:  # one file per bench/scaling.py invocation
        data = json.load(open(path))
        rows += data["rows"]
        print(f"- `{os.path.relpath(path, REPO)}` (`bench/scaling.py {' '.join(data['argv'])}`): {len(data['rows'])} "
              f"cases in {data['wall_s'] / 60:.0f} min; {data['machine']}" + (f" — {data['note']}" if data.get("note")
                                                                              else ""))
    print()
    print("### Largest global batch per chip budget\n")
    print(fit_table(rows) + "\n")
    print("### Every compiled case\n")
    print(sizing_table(rows))
    print(f"\nplot: {plot(rows, a.plot)}")


if __name__ == "__main__":
    main()
