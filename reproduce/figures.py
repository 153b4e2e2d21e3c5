"""Figures of the reproduction (matplotlib, Agg), one PNG each.

    claims.png             the headline MaxMatch rows: Δ with its (1 − α) interval against 0, one row per claim
    ablation_rsum.png      test RSUM of the ablation, baseline and knob cells (2-epoch grid), mean ± std
    flowclip_binding.png   binding mean (Real images) of the frozen CLIP and the four heads, chance as a line
    flowclip_controls.png  ARO-style mean of the same cells under Real / Shuffle / Fixed images, chance as a line
    training_curves.png    training loss and validation RSUM against the step, per seed (the stability check)
    heatmap_<cell>.png     the element-similarity matrix a record stores (2-epoch grid, seed 0)

`aggregate` is `reproduce.tables.aggregate`'s output; `which` is 'best' (best-on-validation parameters) or 'final'.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from reproduce import curves  # noqa: E402

CONTROLS = ("real", "shuffle", "fixed")
GROUP_COLORS = {"ablation": "tab:blue", "baselines": "tab:gray", "knobs": "tab:orange"}
GROUP_NAMES = {"ablation": "MaxMatch ablation", "baselines": "baselines", "knobs": "other defaults"}


def _stat(cell: dict, which: str, metric: str) -> tuple[float, float]:
    s = cell["metrics"][which].get(metric)
    if not s or s["mean"] is None:
        return np.nan, 0.0
    return s["mean"], s["std"]


def _save(fig, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _seeds(cells) -> str:
    ns = sorted({c["n_seeds"] for c in cells})
    return f"{ns[0]} seed{'s' if ns[0] != 1 else ''}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]} seeds"


def _bars(ax, labels, means, stds, colors=None):
    x = np.arange(len(labels))
    ax.bar(x, means, yerr=stds, capsize=4, color=colors or "tab:blue", alpha=0.85)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    for xi, m in zip(x, means):
        if np.isfinite(m):
            ax.annotate(f"{m:.1f}", (xi, m), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)


def ablation_rsum(aggregate: dict, path: str, which: str = "best") -> str | None:
    cells = [c for c in aggregate.values() if c["group"] in GROUP_COLORS]
    if not cells:
        return None
    stats = [_stat(c, which, "rsum") for c in cells]
    colors = [GROUP_COLORS[c["group"]] for c in cells]
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(cells), 4.0))
    _bars(ax, [c["label"] for c in cells], [m for m, _ in stats], [s for _, s in stats], colors)
    ax.set_ylabel("test RSUM (paper inference score)")
    groups = [g for g in GROUP_COLORS if any(c["group"] == g for c in cells)]
    legend = ", ".join(f"{GROUP_NAMES[g]} ({GROUP_COLORS[g].split(':')[1]})" for g in groups)
    ax.set_title(f"{legend}: RSUM, {which} parameters, mean ± std over {_seeds(cells)}", fontsize=9)
    return _save(fig, path)


def flowclip_binding(aggregate: dict, path: str, which: str = "best") -> str | None:
    cells = [c for c in aggregate.values() if c["group"] == "flowclip"]
    if not cells:
        return None
    stats = [_stat(c, which, "binding_real") for c in cells]
    fig, ax = plt.subplots(figsize=(1.5 + 0.9 * len(cells), 4.0))
    _bars(ax, [c["label"] for c in cells], [m for m, _ in stats], [s for _, s in stats])
    chance = _stat(cells[0], which, "binding_chance")[0]
    if np.isfinite(chance):
        ax.axhline(chance, color="k", ls="--", lw=1, label=f"chance {chance:.0f}%")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_ylabel("binding accuracy (%), Real images")
    ax.set_title(f"ShapesWorld binding suites: frozen CLIP and heads ({which} parameters, mean ± std over "
                 f"{_seeds(cells)})", fontsize=9)
    return _save(fig, path)


def flowclip_controls(aggregate: dict, path: str, which: str = "best") -> str | None:
    cells = [c for c in aggregate.values() if c["group"] == "flowclip"]
    if not cells:
        return None
    x = np.arange(len(cells))
    width = 0.8 / len(CONTROLS)
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(cells), 4.0))
    for j, cond in enumerate(CONTROLS):
        stats = [_stat(c, which, f"aro_{cond}") for c in cells]
        ax.bar(x + (j - 1) * width, [m for m, _ in stats], width, yerr=[s for _, s in stats], capsize=3,
               label=cond.capitalize())
    chance = _stat(cells[0], which, "aro_chance")[0]
    if np.isfinite(chance):
        ax.axhline(chance, color="k", ls="--", lw=1, label=f"chance {chance:.0f}%")
    ax.set_xticks(x)
    ax.set_xticklabels([c["label"] for c in cells], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ARO-style mean accuracy (%)")
    ax.legend(fontsize=8, title="image", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"Image-replacement controls (relation, binding, order; {which} parameters, mean ± std over "
                 f"{_seeds(cells)})", fontsize=9)
    return _save(fig, path)


# (title, which aggregate cells, the training loss drawn): retrieval cells, the CLIP pretraining, the heads on it.
CURVE_FAMILIES = (("retrieval cells", lambda name, c: c["group"] != "flowclip", "loss/triplet"),
                  ("frozen CLIP pretraining", lambda name, c: name == "clip", "loss/total"),
                  ("Flow-CLIP / Global-M heads", lambda name, c: c["group"] == "flowclip" and name != "clip",
                   "loss/total"))


def _ramp(cells) -> tuple[int, int] | None:
    """(first, last) logged step with the all-negative weight strictly between 0 and 1 (the hard-negative ramp)."""
    for c in cells:
        for cur in c.get("curves") or ():
            t = cur.get("train") or {}
            w = [(s, x) for s, x in zip(t.get("step", []), t.get("loss/all_negative_weight", [])) if x is not None]
            inside = [s for s, x in w if 0.0 < x < 1.0]
            if inside:
                return inside[0], inside[-1]
    return None


def training_curves(aggregate: dict, path: str) -> str | None:
    """Per family (`CURVE_FAMILIES`): the training loss and the validation RSUM against the step, one line per seed,
    one colour per cell; the hard-negative ramp shaded, the frozen CLIP's own validation RSUM beside its heads."""
    families = [(title, [c for n, c in aggregate.items() if pick(n, c) and any(c.get("curves") or ())], key)
                for title, pick, key in CURVE_FAMILIES]
    families = [f for f in families if f[1]]
    if not families:
        return None
    fig, axes = plt.subplots(len(families), 2, figsize=(12, 3.6 * len(families)), squeeze=False)
    for (title, cells, key), (ax_loss, ax_val) in zip(families, axes):
        semantic = any(curves.val_key(cur) == curves.SEMANTIC_VAL for c in cells for cur in c["curves"] if cur)
        vkey = curves.SEMANTIC_VAL if semantic else "val/rsum"
        colors = plt.cm.tab20(np.linspace(0, 1, max(len(cells), 2)))
        for color, c in zip(colors, cells):
            drawn = [cur for cur in c["curves"] if cur]  # seeds whose records carry curves
            for i, cur in enumerate(drawn):
                t, v = cur.get("train") or {}, cur.get("val") or {}
                label = (c["label"] + (f" ({len(drawn)} of {len(c['curves'])} seeds)" if len(drawn) < len(c["curves"])
                                       else "")) if i == 0 else None
                if t.get(key):
                    ax_loss.plot(t["step"], [np.nan if x is None else x for x in t[key]], color=color, lw=1,
                                 alpha=0.8, label=label)
                if v.get(vkey):
                    ax_val.plot(v["step"], [np.nan if x is None else x for x in v[vkey]], "o-", color=color,
                                ms=3, lw=1, alpha=0.8, label=label)
        base = (aggregate.get("clip") or {}).get("stability", {}).get("best_val_rsum") or {}
        if title.startswith("Flow-CLIP") and base.get("mean") is not None:  # the heads sit on this CLIP
            ax_val.axhline(base["mean"], color="k", ls="--", lw=1, label="frozen CLIP alone (best val RSUM)")
        ramp = _ramp(cells)
        for ax in (ax_loss, ax_val):
            if ramp:
                ax.axvspan(*ramp, color="0.85", zorder=0, label="hard-negative ramp" if ax is ax_val else None)
            ax.set_xlabel("step")
        ax_loss.set_ylabel(key)
        ax_val.set_ylabel(f"validation RSUM ({'semantic' if semantic else 'source'} ground truth)")
        ax_loss.set_title(f"{title}: training {key} (one line per seed)", fontsize=9)
        ax_val.set_title(f"{title}: validation RSUM", fontsize=9)
        ax_val.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return _save(fig, path)


def claims_forest(rows: list[dict], path: str) -> str | None:
    """Each headline row's Δ and its (1 − α) interval, coloured by verdict, with the source's Δ as a cross."""
    rows = [r for r in rows if r["result"].get("delta") is not None]
    if not rows:
        return None
    colors = {"reproduced": "tab:green", "reversed": "tab:red", "not reproduced": "tab:gray",
              "inconclusive": "tab:olive"}
    fig, axes = plt.subplots(1, len(rows), figsize=(1.6 * len(rows) + 1, 3.8), squeeze=False)
    for ax, r in zip(axes[0], rows):
        res, c = r["result"], r["claim"]
        lo, hi = res["ci"] if res.get("ci") else (res["delta"], res["delta"])
        ax.errorbar([0], [res["delta"]], yerr=[[res["delta"] - lo], [hi - res["delta"]]], fmt="o", capsize=5,
                    color=colors.get(res["verdict"], "k"))
        if c.source_delta is not None:
            ax.plot([0.25], [c.source_delta], "x", color="k")
        if c.margin:
            for m in (-c.margin, c.margin):
                ax.axhline(m, color="tab:blue", ls=":", lw=1)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlim(-0.5, 0.6)
        ax.set_xticks([])
        ax.set_title(f"{c.id}\n{res['verdict']}", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("Δ (the row's quantity; × = the source's Δ)", fontsize=8)
    fig.suptitle("MaxMatch claims at the converged budget: Δ with its (1 − α) interval", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def write_figures(report: dict, out: str) -> dict:
    """The charts into `out/figures/`; {name: path relative to `out`} for those with data."""
    quick = report["aggregates"].get("default") or {}
    converged = report["aggregates"].get("converged") or {}
    made = {}
    todo = (("claims", lambda p: claims_forest(report["rows"]["headline"], p)),
            ("ablation_rsum", lambda p: ablation_rsum(quick, p)),
            ("flowclip_binding", lambda p: flowclip_binding(quick, p)),
            ("flowclip_controls", lambda p: flowclip_controls(quick, p)),
            ("training_curves", lambda p: training_curves(converged or quick, p)))
    for name, fn in todo:
        path = fn(os.path.join(out, "figures", f"{name}.png"))
        if path:
            made[name] = os.path.relpath(path, out)
    return made


def draw_heatmaps(aggregate: dict, out: str) -> dict:
    """Each set cell's element-similarity heat map, drawn from the matrix its seed-0 record stores, into
    `out/figures/heatmap_<cell>.png`; {cell name: path relative to `out`}."""
    from mmjax.evaluation import plots
    drawn = {}
    for name, cell in aggregate.items():
        if cell.get("matrix"):
            path = plots.plot_similarity_heatmap(cell["matrix"], os.path.join(out, "figures", f"heatmap_{name}.png"),
                                                 title=f"{cell['label']}: mean element similarity")
            drawn[name] = os.path.relpath(path, out)
    return drawn
