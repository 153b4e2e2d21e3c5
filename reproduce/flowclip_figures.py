"""The Flow-CLIP study's figure (matplotlib): `flowclip_study.png`, one row of two panels per base with heads.

    left   the binding rows' quantity (binding mean, Real images) of every head, one dot per seed, a seed's Global-M
           and Flow-CLIP heads joined by a line (the pairs the paired t-test compares), the mean as a bar; the
           Global-M heads at 2E epochs beside them where they ran
    right  the CIMR rows' accuracies: the mean over the base's prior-bearing suites of the two Flow-CLIP heads under
           Real / Shuffle / Fixed images, one dot per seed and the mean, with the suites' chance and blind (text-only)
           accuracy as lines — how much a head's Shuffle / Fixed accuracy exceeds chance is what CIMR should remove

The y-axes are zoomed to the data (the differences are a few points of a ~100-point scale); a reference line outside
the range is named in the legend as such.
"""

from __future__ import annotations

import numpy as np

from mmjax.evaluation import plots
from reproduce import flowclip_study as FS
from reproduce.figures import _save, zoomed_ylim
from reproduce.grid import FCSTUDY_2E_SUFFIX

GAIN_HEADS = (("globalm_hnb", "Global-M\nHNB"), ("flowclip_hnb", "Flow-CLIP\nHNB"),
              ("globalm_cimr", "Global-M\nHNB+CIMR"), ("flowclip_cimr", "Flow-CLIP\nHNB+CIMR"),
              ("globalm_hnb" + FCSTUDY_2E_SUFFIX, "Global-M\nHNB, 2E"),
              ("globalm_cimr" + FCSTUDY_2E_SUFFIX, "Global-M\nHNB+CIMR, 2E"))
PAIRS = (("globalm_hnb", "flowclip_hnb"), ("globalm_cimr", "flowclip_cimr"))
CIMR_HEADS = (("flowclip_hnb", "Flow-CLIP, HNB", "tab:blue"), ("flowclip_cimr", "Flow-CLIP, HNB+CIMR", "tab:red"))
CONDITIONS = ("real", "shuffle", "fixed")


def _per_seed(cells: dict, base: str, head: str, fn) -> dict:
    return {k: v for k, m in (cells.get(FS.head_cell(base, head)) or {}).items() for v in [fn(m)] if v is not None}


def _ref_line(ax, y, lim, label, **kw):
    if not np.isfinite(y):
        return
    where = "" if lim is None or lim[0] <= y <= lim[1] else " (below the axis)" if y < lim[0] else " (above the axis)"
    ax.axhline(y, label=f"{label} {y:.1f} %{where}", **kw)


def _gain_panel(ax, cells, base, gate):
    heads = [(h, label, _per_seed(cells, base, h, lambda m: m.get("binding_real"))) for h, label in GAIN_HEADS]
    heads = [x for x in heads if x[2]]
    pos = {h: i for i, (h, _, _) in enumerate(heads)}
    for a, b in PAIRS:
        if a in pos and b in pos:
            va, vb = heads[pos[a]][2], heads[pos[b]][2]
            for k in sorted(set(va) & set(vb)):
                ax.plot([pos[a], pos[b]], [va[k], vb[k]], color="0.6", lw=0.8, zorder=1)
    vals = []
    for i, (h, _, v) in enumerate(heads):
        ys = [v[k] for k in sorted(v)]
        vals += ys
        ax.scatter(np.full(len(ys), i), ys, s=18, color="tab:green" if h.startswith("flowclip") else "tab:gray",
                   zorder=3)
        ax.hlines(np.mean(ys), i - 0.25, i + 0.25, color="k", lw=2, zorder=4)
    lim = zoomed_ylim(vals, [0.0] * len(vals))
    if lim:
        ax.set_ylim(*lim)
    _ref_line(ax, 50.0, lim, "chance", color="k", ls="--", lw=1)
    ax.set_xticks(range(len(heads)))
    ax.set_xticklabels([label for _, label, _ in heads], fontsize=7)
    ax.set_ylabel("binding mean (%), Real images, test split", fontsize=8)
    n = sorted({len(v) for _, _, v in heads})
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}–{n[-1]}"
    # A base whose local tokens fail gate 1 still shows its heads, but its binding rows are untestable: say so.
    rows = "binding gain rows (FB1, FB2)" if gate.get("binding") else "binding mean (FB1, FB2 untestable: gate 1 fails)"
    ax.set_title(f"base {base}: {rows}; dots = seeds ({seeds} per head), bar = mean, lines join a seed's pair",
                 fontsize=8)
    ax.legend(fontsize=7, loc="lower right")


def _controls_panel(ax, cells, base, gate):
    suites = gate.get("prior_suites") or []
    if not suites:
        ax.set_axis_off()
        ax.set_title(f"base {base}: no prior-bearing suite (gate 2)", fontsize=8)
        return
    vals = []
    width = 0.35
    for j, (h, label, color) in enumerate(CIMR_HEADS):
        for i, cond in enumerate(CONDITIONS):
            v = _per_seed(cells, base, h, lambda m: FS._suite_mean(m, suites, cond))
            ys = [v[k] for k in sorted(v)]
            if not ys:
                continue
            x = i + (j - 0.5) * width
            vals += ys
            ax.scatter(np.full(len(ys), x), ys, s=16, color=color, alpha=0.8, zorder=3,
                       label=label if i == 0 else None)
            ax.hlines(np.mean(ys), x - 0.14, x + 0.14, color=color, lw=2.5, zorder=4)
    chance = np.mean([gate["blind"][s][1] for s in suites])
    blind = np.mean([gate["blind"][s][0] for s in suites])
    lim = zoomed_ylim(vals, [0.0] * len(vals), (chance,))
    if lim:
        ax.set_ylim(*lim)
    _ref_line(ax, chance, lim, "chance (suite mean)", color="k", ls="--", lw=1)
    _ref_line(ax, blind, lim, "blind text-only model", color="tab:purple", ls=":", lw=1.2)
    ax.set_xticks(range(len(CONDITIONS)))
    ax.set_xticklabels([c.capitalize() for c in CONDITIONS], fontsize=8)
    ax.set_xlabel("image shown with the caption pair", fontsize=8)
    ax.set_ylabel(f"accuracy (%), mean over {len(suites)} prior-bearing suites", fontsize=8)
    ax.set_title(f"base {base}: CIMR rows (FC1–FC3): {', '.join(suites)}", fontsize=8)
    ax.legend(fontsize=7, loc="upper right")


def study_figure(study: dict | None, cells: dict, path: str) -> str | None:
    """The figure (module docstring) for the bases whose heads have run; None when none has."""
    if not study:
        return None
    bases = [b for b in FS.BASES if any(cells.get(FS.head_cell(b, h)) for h in FS.HEADS)]
    if not bases:
        return None
    fig, axes = plots.new_figure(len(bases), 2, figsize=(13, 4.2 * len(bases)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.3, 1]})
    for row, base in zip(axes, bases):
        _gain_panel(row[0], cells, base, study["gates"][base])
        _controls_panel(row[1], cells, base, study["gates"][base])
        for ax in row:
            ax.grid(axis="y", lw=0.5, alpha=0.4)
            ax.set_axisbelow(True)
            ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("Flow-CLIP study (flowclip budget): per-seed test accuracies of the heads", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _oracle_series(record, head, kind, cond):
    """[σ] of per-seed accuracy lists for one head, record type and condition."""
    return [[r["heads"][head]["controls"][kind][cond] for r in record["runs"] if r["noise"] == s]
            for s in record["noises"]]


def oracle_figure(record: dict | None, path: str) -> str | None:
    """`flowclip_oracle.png`: the mechanism oracle (reproduce/flowclip_oracle.py) against feature noise σ.

    left   swap records under Real: Global-M · HNB and Flow-CLIP · HNB (the binding gain's mechanism)
    right  replace records: excess over chance under Shuffle and Fixed for Flow-CLIP · HNB and · HNB + CIMR, with
           half of HNB's excess dotted (FC1/FC2 ask CIMR to end at or below it)
    Dots are seeds, lines join the means."""
    if not record:
        return None
    from reproduce.flowclip_oracle import CHANCE
    x = np.asarray(record["noises"], np.float64)
    jitter = 0.004
    fig, (left, right) = plots.new_figure(1, 2, figsize=(13.5, 4.2))
    for head, label, color, dx in (("globalm_hnb", "Global-M · HNB", "tab:gray", -jitter),
                                   ("flowclip_hnb", "Flow-CLIP · HNB", "tab:green", jitter)):
        ys = _oracle_series(record, head, "swap", "real")
        for xi, y in zip(x, ys):
            left.scatter(np.full(len(y), xi + dx), y, s=12, color=color, alpha=0.6)
        left.plot(x + dx, [np.mean(y) for y in ys], color=color, marker="o", label=label)
    left.axhline(CHANCE, color="k", ls="--", lw=1, label=f"chance {CHANCE:g} %")
    left.set_ylabel("accuracy (%), swap negatives, Real images", fontsize=8)
    left.set_title("binding: swap negatives keep the bag of words", fontsize=9)
    for cond, marker in (("shuffle", "o"), ("fixed", "s")):
        for head, label, color, dx in (("flowclip_hnb", "HNB", "tab:blue", -jitter),
                                       ("flowclip_cimr", "HNB + CIMR", "tab:red", jitter)):
            ys = [np.asarray(y) - CHANCE for y in _oracle_series(record, head, "replace", cond)]
            for xi, y in zip(x, ys):
                right.scatter(np.full(len(y), xi + dx), y, s=10, color=color, marker=marker, alpha=0.5)
            right.plot(x + dx, [np.mean(y) for y in ys], color=color, marker=marker,
                       ls="-" if cond == "shuffle" else "--", label=f"{label}, {cond.capitalize()}")
            if head == "flowclip_hnb":
                right.plot(x, [0.5 * np.mean(y) for y in ys], color="0.4", lw=1,
                           ls=":" if cond == "shuffle" else (0, (1, 4)), label=f"½ HNB's excess, {cond.capitalize()}")
    right.axhline(0.0, color="k", lw=0.8)
    right.set_ylabel("accuracy − chance (points), replace negatives", fontsize=8)
    right.set_title("language prior: the image replaced (Shuffle, Fixed)", fontsize=9)
    for ax in (left, right):
        ax.set_xticks(x)
        ax.set_xticklabels([f"{v:g}" for v in x], fontsize=8)
        ax.set_xlabel("feature noise σ (harder →)", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", lw=0.5, alpha=0.4)
    left.legend(fontsize=7)
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the seeds' dots fill the panel
    fig.suptitle(f"Mechanism oracle on planted features ({record['steps']} steps, {len(record['seeds'])} seeds per σ;"
                 " decides no row)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
