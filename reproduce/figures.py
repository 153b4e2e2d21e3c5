"""Figures of the reproduction (matplotlib), one PNG each.

    claims.png             the headline MaxMatch rows: Δ with its (1 − α) interval against 0, one row per claim
    ablation_rsum.png      test RSUM of the ablation, baseline and knob cells (2-epoch grid), mean ± std
    flowclip_binding.png   binding mean (Real images) of the frozen CLIP and the four heads, chance as a line
    flowclip_controls.png  ARO-style mean of the same cells under Real / Shuffle / Fixed images, chance as a line
    training_curves.png    training loss and validation RSUM against the step, per seed (the stability check)
    flowclip_study.png     the Flow-CLIP study's heads per seed: binding gain pairs and CIMR controls
                           (`reproduce.flowclip_figures`)
    heatmap_<cell>.png     the element-similarity matrix a record stores (2-epoch grid, seed 0), one colour
                           scale for all cells

`aggregate` is `reproduce.tables.aggregate`'s output; `which` is 'best' (best-on-validation parameters) or 'final'.
"""

from __future__ import annotations

import os

import matplotlib
from matplotlib.ticker import MaxNLocator
import numpy as np

from mmjax.evaluation import plots
from reproduce import curves

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
    return path


def _seeds(cells) -> str:
    ns = sorted({c["n_seeds"] for c in cells})
    return f"{ns[0]} seed{'s' if ns[0] != 1 else ''}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]} seeds"


def zoomed_ylim(means, stds, refs=(), *, headroom: float = 0.14) -> tuple[float, float] | None:
    """y-limits around mean ± std of the bars (not from 0: the differences the claims are about are a few percent of
    the bars' height), with room above for the value labels; a reference line (chance) joins the range when it lies
    within one data span of it. Non-negative data never get a negative lower limit. None without finite means."""
    m = np.asarray(means, np.float64)
    s = np.nan_to_num(np.asarray(stds, np.float64))
    ok = np.isfinite(m)
    if not ok.any():
        return None
    lo, hi = float(np.min(m[ok] - s[ok])), float(np.max(m[ok] + s[ok]))
    span = hi - lo or max(abs(hi) * 0.05, 1.0)
    for r in refs:
        if r is not None and np.isfinite(r) and lo - span <= r <= hi + span:
            lo, hi = min(lo, r), max(hi, r)
    span = hi - lo or span
    step = _nice_step(span / 5)
    bottom = np.floor((lo - 0.08 * span) / step) * step  # a round number: the cut is read off the axis
    if lo >= 0 > bottom:
        bottom = 0.0
    return float(bottom), hi + headroom * span + 0.06 * span


def _nice_step(x: float) -> float:
    """The smallest of 1, 2, 5 × 10^k that is ≥ x."""
    k = 10.0 ** np.floor(np.log10(x)) if x > 0 else 1.0
    return next(m * k for m in (1, 2, 5, 10) if m * k >= x)


def _bars(ax, labels, means, stds, colors=None, *, refs=(), x=None, width=0.8, label_size=7):
    """Bars with error bars, each mean written above its error bar's cap; the y-axis zoomed to the data
    (`zoomed_ylim`). Returns the limits (None: left to matplotlib)."""
    x = np.arange(len(labels)) if x is None else np.asarray(x, np.float64)
    stds = [0.0 if not np.isfinite(s) else s for s in stds]
    ax.bar(x, means, width, yerr=stds, capsize=4 if width > 0.5 else 3, color=colors or "tab:blue", alpha=0.85,
           error_kw={"lw": 1.2})
    for xi, m, sd in zip(x, means, stds):
        if np.isfinite(m):
            ax.annotate(f"{m:.1f}", (xi, m + sd), textcoords="offset points", xytext=(0, 3), ha="center",
                        va="bottom", fontsize=label_size)
    if labels is not None:
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    lim = zoomed_ylim(means, stds, refs)
    if lim:
        ax.set_ylim(*lim)
    return lim


def _cut_note(lim) -> str:
    return f"\n(axis from {lim[0]:g}, not 0)" if lim and lim[0] > 0 else ""


def ablation_rsum(aggregate: dict, path: str, which: str = "best") -> str | None:
    from matplotlib.patches import Patch
    cells = [c for c in aggregate.values() if c["group"] in GROUP_COLORS]
    if not cells:
        return None
    stats = [_stat(c, which, "rsum") for c in cells]
    colors = [GROUP_COLORS[c["group"]] for c in cells]
    fig, ax = plots.new_figure(figsize=(1.0 + 0.8 * len(cells), 4.0))
    lim = _bars(ax, [c["label"] for c in cells], [m for m, _ in stats], [s for _, s in stats], colors)
    ax.set_ylabel("test RSUM (paper inference score)" + _cut_note(lim), fontsize=9)
    groups = [g for g in GROUP_COLORS if any(c["group"] == g for c in cells)]
    ax.legend(handles=[Patch(color=GROUP_COLORS[g], alpha=0.85, label=GROUP_NAMES[g]) for g in groups], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", lw=0.5, alpha=0.4)
    ax.set_axisbelow(True)
    ax.set_title(f"Test RSUM per cell ({which} parameters, mean ± std over {_seeds(cells)})", fontsize=9)
    return _save(fig, path)


def flowclip_binding(aggregate: dict, path: str, which: str = "best") -> str | None:
    cells = [c for c in aggregate.values() if c["group"] == "flowclip"]
    if not cells:
        return None
    stats = [_stat(c, which, "binding_real") for c in cells]
    chance = _stat(cells[0], which, "binding_chance")[0]
    fig, ax = plots.new_figure(figsize=(1.5 + 0.9 * len(cells), 4.0))
    lim = _bars(ax, [c["label"] for c in cells], [m for m, _ in stats], [s for _, s in stats], refs=(chance,))
    if np.isfinite(chance):
        shown = lim is None or lim[0] <= chance <= lim[1]
        ax.axhline(chance, color="k", ls="--", lw=1,
                   label=f"chance {chance:.0f}%" + ("" if shown else " (below the axis)" if lim[0] > chance
                                                      else " (above the axis)"))
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_ylabel("binding accuracy (%), Real images" + _cut_note(lim), fontsize=9)
    ax.grid(axis="y", lw=0.5, alpha=0.4)
    ax.set_axisbelow(True)
    ax.set_title(f"ShapesWorld binding suites: frozen CLIP and heads ({which} parameters, mean ± std over "
                 f"{_seeds(cells)})", fontsize=9)
    return _save(fig, path)


def flowclip_controls(aggregate: dict, path: str, which: str = "best") -> str | None:
    cells = [c for c in aggregate.values() if c["group"] == "flowclip"]
    if not cells:
        return None
    x = np.arange(len(cells))
    width = 0.8 / len(CONTROLS)
    chance = _stat(cells[0], which, "aro_chance")[0]
    fig, ax = plots.new_figure(figsize=(1.5 + 1.3 * len(cells), 4.2))
    all_m, all_s = [], []
    for j, cond in enumerate(CONTROLS):
        stats = [_stat(c, which, f"aro_{cond}") for c in cells]
        ms, ss = [m for m, _ in stats], [0.0 if not np.isfinite(s) else s for _, s in stats]
        ax.bar(x + (j - 1) * width, ms, width, yerr=ss, capsize=3, label=cond.capitalize(), color=f"C{j}",
               error_kw={"lw": 1.2})
        for xi, m, sd in zip(x + (j - 1) * width, ms, ss):
            if np.isfinite(m):
                ax.annotate(f"{m:.1f}", (xi, m + sd), textcoords="offset points", xytext=(0, 2), ha="center",
                            va="bottom", fontsize=6)
        all_m += ms
        all_s += ss
    lim = zoomed_ylim(all_m, all_s, (chance,))
    if lim:
        ax.set_ylim(*lim)
    if np.isfinite(chance):
        ax.axhline(chance, color="k", ls="--", lw=1, label=f"chance {chance:.0f}%")
    ax.set_xticks(x)
    ax.set_xticklabels([c["label"] for c in cells], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ARO-style mean accuracy (%)" + _cut_note(lim), fontsize=9)
    ax.grid(axis="y", lw=0.5, alpha=0.4)
    ax.set_axisbelow(True)
    ax.legend(fontsize=8, title="image", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"Image-replacement controls (relation, binding, order; {which} parameters, mean ± std over "
                 f"{_seeds(cells)})", fontsize=9)
    return _save(fig, path)


# (title, which aggregate cells, the training loss drawn): retrieval cells, the CLIP pretraining, the heads on it.
CURVE_FAMILIES = (("retrieval cells", lambda name, c: c["group"] != "flowclip", "loss/triplet"),
                  ("frozen CLIP pretraining", lambda name, c: name == "clip", "loss/total"),
                  ("Flow-CLIP / Global-M heads", lambda name, c: c["group"] == "flowclip" and name != "clip",
                   "loss/total"))


def _ramp(cells) -> tuple[float, float] | None:
    """The warm-up → hardest-negative switch (`plots.switch_steps`) of the first seed whose curves log the
    all-negative weight: from the last logged step still at 1 to the first at 0."""
    for c in cells:
        for cur in c.get("curves") or ():
            t = (cur or {}).get("train") or {}
            ramp = plots.switch_steps(t.get("step", []), t.get("loss/all_negative_weight", []))
            if ramp:
                return ramp
    return None


def training_curves(aggregate: dict, path: str) -> str | None:
    """Per family (`CURVE_FAMILIES`): the training loss (lines) and the validation RSUM (points) against the step,
    one line per seed, one colour per cell; the warm-up → hardest-negative switch shaded and marked, the frozen CLIP's
    own validation RSUM beside its heads."""
    families = [(title, [c for n, c in aggregate.items() if pick(n, c) and any(c.get("curves") or ())], key)
                for title, pick, key in CURVE_FAMILIES]
    families = [f for f in families if f[1]]
    if not families:
        return None
    fig, axes = plots.new_figure(len(families), 2, figsize=(12, 3.8 * len(families)), squeeze=False, sharex="row")
    for (title, cells, key), (ax_loss, ax_val) in zip(families, axes):
        semantic = any(curves.val_key(cur) == curves.SEMANTIC_VAL for c in cells for cur in c["curves"] if cur)
        vkey = curves.SEMANTIC_VAL if semantic else "val/rsum"
        colors = matplotlib.colormaps["tab20"](np.linspace(0, 1, max(len(cells), 2)))
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
                    ax_val.plot(v["step"], [np.nan if x is None else x for x in v[vkey]], ls=":", marker="o",
                                color=color, ms=4, lw=0.8, alpha=0.9, label=label)
        base = (aggregate.get("clip") or {}).get("stability", {}).get("best_val_rsum") or {}
        if title.startswith("Flow-CLIP") and base.get("mean") is not None:  # the heads sit on this CLIP
            ax_val.axhline(base["mean"], color="k", ls="--", lw=1, label="frozen CLIP alone (best val RSUM)")
        ramp = _ramp(cells)
        for ax in (ax_loss, ax_val):
            if ramp:
                ax.axvspan(*ramp, color="tab:red", alpha=0.12, lw=0, zorder=0,
                           label="hard-negative ramp" if ax is ax_val else None)
                ax.axvline(ramp[0], color="tab:red", ls="--", lw=0.8)
                ax.annotate("warm-up → hardest negative", (ramp[0], 1.0), xycoords=("data", "axes fraction"),
                            xytext=(3, -3), textcoords="offset points", ha="left", va="top", fontsize=7,
                            color="tab:red")
            ax.set_xlabel("step", fontsize=9)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        name = plots.curve_name(key)
        ax_loss.set_ylabel(name, fontsize=9)
        ax_val.set_ylabel(f"RSUM ({'semantic' if semantic else 'source'} ground truth)", fontsize=9)
        ax_loss.set_title(f"{title}\ntraining {name} (lines, one per seed)", fontsize=10)
        ax_val.set_title(f"{title}\nvalidation RSUM (points, one series per seed)", fontsize=10)
        ax_val.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return _save(fig, path)


VERDICT_COLORS = {"reproduced": "tab:green", "reversed": "tab:red", "not reproduced": "tab:gray",
                  "inconclusive": "tab:olive", "untestable": "tab:purple"}


def claims_forest(rows: list[dict], path: str) -> str | None:
    """Each headline row's Δ and its (1 − α) interval, coloured by verdict, with the source's Δ as a cross; the
    row's quantity under each panel, one key for colours and markers below the panels."""
    import textwrap

    from matplotlib.lines import Line2D

    from reproduce.claims import QUANTITY_NAMES
    rows = [r for r in rows if r["result"].get("delta") is not None]
    if not rows:
        return None
    fig, axes = plots.new_figure(1, len(rows), figsize=(1.6 * len(rows) + 1, 4.4), squeeze=False)
    margins = sources = False
    for ax, r in zip(axes[0], rows):
        res, c = r["result"], r["claim"]
        lo, hi = res["ci"] if res.get("ci") else (res["delta"], res["delta"])
        ax.errorbar([0], [res["delta"]], yerr=[[res["delta"] - lo], [hi - res["delta"]]], fmt="o", capsize=5,
                    color=VERDICT_COLORS.get(res["verdict"], "k"))
        if c.source_delta is not None:
            ax.plot([0.25], [c.source_delta], "x", color="k", ms=7, mew=1.5)
            sources = True
        if c.margin:
            margins = True
            for m in (-c.margin, c.margin):
                ax.axhline(m, color="tab:blue", ls=":", lw=1)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlim(-0.5, 0.6)
        ax.set_xticks([])
        ax.set_title(f"{c.id}\n{res['verdict']}", fontsize=8)
        ax.set_xlabel(textwrap.fill(QUANTITY_NAMES.get(c.quantity, c.quantity), 18), fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("Δ (in the quantity under each panel)", fontsize=8)
    verdicts = [v for v in VERDICT_COLORS if any(r["result"]["verdict"] == v for r in rows)]
    handles = [Line2D([], [], color=VERDICT_COLORS[v], marker="o", ls="-", label=f"measured Δ, {v}") for v in verdicts]
    if sources:
        handles.append(Line2D([], [], color="k", marker="x", ls="", ms=7, mew=1.5, label="the source's Δ"))
    if margins:
        handles.append(Line2D([], [], color="tab:blue", ls=":", label="equivalence margin"))
    handles.append(Line2D([], [], color="k", lw=0.8, label="Δ = 0"))
    fig.suptitle("MaxMatch claims at the converged budget: Δ with its (1 − α) interval", fontsize=10)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    return _save(fig, path)


def write_figures(report: dict, out: str) -> dict:
    """The charts into `out/figures/`; {name: path relative to `out`} for those with data."""
    from reproduce import flowclip_figures  # it draws with this module's helpers
    quick = report["aggregates"].get("default") or {}
    converged = report["aggregates"].get("converged") or {}
    made = {}
    todo = (("claims", lambda p: claims_forest(report["rows"]["headline"], p)),
            ("ablation_rsum", lambda p: ablation_rsum(quick, p)),
            ("flowclip_binding", lambda p: flowclip_binding(quick, p)),
            ("flowclip_controls", lambda p: flowclip_controls(quick, p)),
            ("training_curves", lambda p: training_curves(converged or quick, p)),
            ("flowclip_study", lambda p: flowclip_figures.study_figure(
                report.get("fcstudy"), (report.get("cells") or {}).get("flowclip") or {}, p)),
            ("flowclip_oracle", lambda p: flowclip_figures.oracle_figure(report.get("flowclip_oracle"), p)))
    for name, fn in todo:
        path = fn(os.path.join(out, "figures", f"{name}.png"))
        if path:
            made[name] = os.path.relpath(path, out)
    return made


def draw_heatmaps(aggregate: dict, out: str) -> dict:
    """Each set cell's element-similarity heat map, drawn from the matrix its seed-0 record stores, into
    `out/figures/heatmap_<cell>.png`, all on one colour scale (the range over every cell's matrix: the maps are
    compared); {cell name: path relative to `out`}."""
    cells = {name: cell for name, cell in aggregate.items() if cell.get("matrix")}
    vmin, vmax = plots.shared_range([cell["matrix"] for cell in cells.values()])
    drawn = {}
    for name, cell in cells.items():
        path = plots.plot_similarity_heatmap(
            cell["matrix"], os.path.join(out, "figures", f"heatmap_{name}.png"),
            title=f"{cell['label']}\nmean element similarity, matched test pairs", vmin=vmin, vmax=vmax,
            cbar_label=plots.HEATMAP_CBAR_LABEL + f"\n(one scale for all {len(cells)} cells)")
        drawn[name] = os.path.relpath(path, out)
    return drawn
