"""PNG figures (matplotlib): element-similarity heatmap (MaxMatch Fig. 4), a 2-D picture of element
embeddings (Fig. 3; PCA by numpy SVD, or a small exact t-SNE for a few hundred points), and training curves from a
metrics JSONL (one JSON object per line with "step" and metric keys; lines without "step" are skipped).

t-SNE here is the plain exact algorithm (perplexity-calibrated Gaussian affinities, Student-t low-dimensional
kernel, early exaggeration 12 for the first 100 of `iters` steps, momentum gradient descent). It is O(n²) and meant
for ≤ ~2 000 points; larger inputs are subsampled (seeded).
"""

from __future__ import annotations

import os
import textwrap

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
import numpy as np

from mmjax.jsonl import read_jsonl
from mmjax.normalize import unit_normalize


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize, **subplots_kw):
    """(figure, axes) outside pyplot: no backend is chosen or switched and no figure is registered, so saving a PNG
    behaves the same in a script, on a node with a display, and in a notebook (where pyplot would also show it, and a
    library's `matplotlib.use` would turn the notebook's inline figures into text). `savefig` renders with Agg."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **subplots_kw)


def _save(fig, path) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return str(path)


def _wrap(text: str, width: int) -> str:
    """`text` wrapped at `width` characters, line by line (explicit newlines kept)."""
    return "\n".join(textwrap.fill(line, max(width, 12)) for line in str(text).split("\n"))


def _integer_ticks(ax, n_cols: int, n_rows: int) -> None:
    """Element indices as integer ticks on both axes of an image-like plot."""
    ax.set_xticks(range(n_cols))
    ax.set_yticks(range(n_rows))
    ax.set_xticklabels([str(j) for j in range(n_cols)])
    ax.set_yticklabels([str(i) for i in range(n_rows)])


def draw_similarity_heatmap(ax, matrix, *, title: str | None = None, vmin=None, vmax=None, cmap: str = "viridis"):
    """Draws the K_V × K_T matrix into `ax` (values written in the cells, black or white by the cell's brightness,
    integer element-index ticks); returns the image for a colourbar. `vmin`/`vmax` fix the colour scale (a shared
    scale for panels that are compared); None: the matrix's own range."""
    m = np.asarray(matrix, np.float32)
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            r, g, b, _ = im.cmap(im.norm(m[i, j]))
            ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w")
    ax.set_xlabel("caption element j")
    ax.set_ylabel("image element i")
    _integer_ticks(ax, m.shape[1], m.shape[0])
    if title:
        ax.set_title(title, fontsize=9)
    return im


HEATMAP_CBAR_LABEL = r"mean cosine similarity $\langle v_i, t_j \rangle$"


def plot_similarity_heatmap(matrix, path, *, title: str = "mean element similarity (matched pairs)", vmin=None,
                            vmax=None, cbar_label: str = HEATMAP_CBAR_LABEL) -> str:
    """K_V × K_T heatmap with the values written in the cells and a labelled colourbar; `vmin`/`vmax` give heat maps
    that are compared one colour scale (None: this matrix's range)."""
    m = np.asarray(matrix, np.float32)
    width = 1.6 + 0.8 * m.shape[1]
    fig, ax = new_figure(figsize=(width, 1.0 + 0.8 * m.shape[0]))
    im = draw_similarity_heatmap(ax, m, title=_wrap(title, int(12 * width)), vmin=vmin, vmax=vmax)
    cbar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    cbar.set_label(cbar_label, fontsize=8)
    cbar.ax.tick_params(labelsize=7)
    return _save(fig, path)


def plot_similarity_heatmaps(matrices: dict, path, *, vmin=None, vmax=None, cols: int = 4,
                             cbar_label: str = HEATMAP_CBAR_LABEL) -> str:
    """{panel title (e.g. the cell's name): matrix} side by side on one colour scale (`vmin`/`vmax`, default the
    range of all of them) with one labelled colourbar."""
    mats = {t: np.asarray(m, np.float32) for t, m in matrices.items()}
    if not mats:
        raise ValueError("plot_similarity_heatmaps needs at least one matrix")
    lo, hi = shared_range(mats.values())
    vmin, vmax = (lo if vmin is None else vmin), (hi if vmax is None else vmax)
    cols = min(cols, len(mats))
    rows = -(-len(mats) // cols)
    k = max(max(m.shape) for m in mats.values())
    fig, axes = new_figure(rows, cols, figsize=(0.4 + (0.6 * k + 0.8) * cols, (0.6 * k + 1.1) * rows),
                             squeeze=False)
    im = None
    for ax, (t, m) in zip(axes.flat, mats.items()):
        im = draw_similarity_heatmap(ax, m, title=_wrap(t, int(10 * (0.6 * k + 0.8))), vmin=vmin, vmax=vmax)
    for ax in list(axes.flat)[len(mats):]:
        ax.axis("off")
    fig.tight_layout()
    cbar = fig.colorbar(im, ax=list(axes.flat), fraction=0.02, pad=0.02)
    cbar.set_label(cbar_label + " (one scale for all panels)", fontsize=8)
    return _save(fig, path)


def shared_range(matrices) -> tuple[float, float]:
    """(min, max) over all finite entries of `matrices`: the one colour scale of heat maps that are compared."""
    vals = np.concatenate([np.asarray(m, np.float64).ravel() for m in matrices] or [np.zeros(0)])
    vals = vals[np.isfinite(vals)]
    if not vals.size:
        return 0.0, 1.0
    lo, hi = float(vals.min()), float(vals.max())
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def pca_2d(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    x = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return x @ vt[:2].T


def _affinities(x: np.ndarray, perplexity: float) -> np.ndarray:
    d = np.sum((x[:, None] - x[None]) ** 2, axis=-1)
    n = len(x)
    p = np.zeros((n, n))
    target = np.log(perplexity)
    for i in range(n):
        lo, hi, beta = 0.0, np.inf, 1.0
        di = np.delete(d[i], i)
        for _ in range(50):  # bisection on the precision β so that the entropy equals log(perplexity)
            w = np.exp(-(di - di.min()) * beta)
            pi = w / w.sum()
            h = -np.sum(pi * np.log(np.maximum(pi, 1e-12)))
            if abs(h - target) < 1e-4:
                break
            if h > target:
                lo, beta = beta, beta * 2 if hi == np.inf else (beta + hi) / 2
            else:
                hi, beta = beta, (beta + lo) / 2
        p[i, np.arange(n) != i] = pi
    p = (p + p.T) / (2 * n)
    return np.maximum(p, 1e-12)


def tsne_2d(x, *, perplexity: float = 30.0, iters: int = 300, seed: int = 0) -> np.ndarray:
    """Exact t-SNE to 2-D (module docstring)."""
    x = pca_2d_like(np.asarray(x, np.float64), 50)
    n = len(x)
    p = _affinities(x, min(perplexity, max(2.0, (n - 1) / 3)))
    rng = np.random.default_rng(seed)
    y = 1e-4 * rng.standard_normal((n, 2))
    velocity = np.zeros_like(y)
    for it in range(iters):
        exaggeration = 12.0 if it < 100 else 1.0
        diff = y[:, None] - y[None]
        num = 1.0 / (1.0 + np.sum(diff ** 2, axis=-1))
        np.fill_diagonal(num, 0.0)
        q = np.maximum(num / num.sum(), 1e-12)
        grad = 4.0 * np.sum(((exaggeration * p - q) * num)[..., None] * diff, axis=1)
        velocity = (0.5 if it < 100 else 0.8) * velocity - 100.0 * grad
        y = y + velocity
        y = y - y.mean(axis=0)
    return y


def pca_2d_like(x: np.ndarray, dims: int) -> np.ndarray:
    """Projects to at most `dims` principal components (t-SNE preprocessing)."""
    if x.shape[1] <= dims:
        return x
    x = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return x @ vt[:dims].T


def _element_colors(k: int) -> list:
    cmap = matplotlib.colormaps["tab10" if k <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(k)]


def plot_element_embeddings(image_sets, caption_sets, path, *, method: str = "pca", max_sets: int = 100,
                            seed: int = 0) -> str:
    """Scatter of the elements of the first `max_sets` image sets (filled circles) and caption sets (crosses) in 2-D,
    coloured by element index k (paper Fig. 3), with a colour key (element index) and a marker key (modality)."""
    from matplotlib.lines import Line2D

    img = np.asarray(image_sets)[:max_sets]
    txt = np.asarray(caption_sets)[:max_sets]
    pts = np.concatenate([img.reshape(-1, img.shape[-1]), txt.reshape(-1, txt.shape[-1])])
    pts = unit_normalize(pts)
    if method == "pca":
        y = pca_2d(pts)
        centred = np.asarray(pts, np.float64) - np.asarray(pts, np.float64).mean(axis=0)
        var = np.linalg.svd(centred, compute_uv=False) ** 2
        share = 100.0 * var[:2] / max(var.sum(), 1e-30)
        xlabel, ylabel = (f"principal component {i + 1} ({share[i]:.0f}% of variance)" for i in range(2))
        name = "PCA"
    elif method == "tsne":
        y = tsne_2d(pts, seed=seed)
        xlabel, ylabel, name = "t-SNE dimension 1", "t-SNE dimension 2", "t-SNE"
    else:
        raise ValueError(f"method must be 'pca' or 'tsne', got {method!r}")
    n_img = img.shape[0] * img.shape[1]
    y_img = y[:n_img].reshape(img.shape[0], img.shape[1], 2)
    y_txt = y[n_img:].reshape(txt.shape[0], txt.shape[1], 2)
    k_max = max(img.shape[1], txt.shape[1])
    colors = _element_colors(k_max)
    fig, ax = new_figure(figsize=(7.5, 5))
    for k in range(img.shape[1]):
        ax.scatter(y_img[:, k, 0], y_img[:, k, 1], color=colors[k], marker="o", s=18, alpha=0.55, linewidths=0)
    for k in range(txt.shape[1]):
        ax.scatter(y_txt[:, k, 0], y_txt[:, k, 1], color=colors[k], marker="x", s=24, alpha=0.8, linewidths=1.0)
    colour_key = ax.legend(handles=[Line2D([], [], ls="", marker="s", markersize=7, color=colors[k], label=f"k = {k}")
                                    for k in range(k_max)],
                           title="colour: element index", fontsize=8, title_fontsize=8, loc="upper left",
                           bbox_to_anchor=(1.01, 1.0), ncol=-(-k_max // 16))
    ax.add_artist(colour_key)
    ax.legend(handles=[Line2D([], [], ls="", marker="o", markersize=6, color="0.3", alpha=0.7,
                              label=f"image element ({img.shape[0]} sets)"),
                       Line2D([], [], ls="", marker="x", markersize=6, color="0.3", markeredgewidth=1.2,
                              label=f"caption element ({txt.shape[0]} sets)")],
              title="marker: modality", fontsize=8, title_fontsize=8, loc="lower left", bbox_to_anchor=(1.01, 0.0))
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.set_title(f"Element embeddings ({name} of the unit-normalised elements)", fontsize=10)
    return _save(fig, path)


def read_metrics_jsonl(path) -> list[dict]:
    """The rows of a metrics.jsonl that carry a step; a broken line (a killed run's last) is skipped with a warning
    naming file and line (`mmjax.jsonl`)."""
    return [row for row in read_jsonl(path) if "step" in row]


def default_curve_keys(keys) -> list[str]:
    """The curves worth a panel: losses, gradient norm, learning rate and the headline validation metrics (R@1s and
    RSUM of every score); wall-clock time, throughput and rank statistics stay in the JSONL."""
    def wanted(k):
        if k.startswith("loss/") or k in ("grad_norm", "lr", "logit_scale"):
            return True
        return k.startswith("val/") and k.endswith(("rsum", "i2t_r1", "t2i_r1"))
    return sorted(k for k in keys if wanted(k))


_SERIES_SUFFIX = {"i2t": "image → text", "t2i": "text → image"}
_NAMES = {"loss/total": "total loss", "loss/contrastive": "contrastive loss", "loss/div": "Div loss (diversity)",
          "loss/mmd": "MMD loss", "loss/gd": "GD loss", "loss/isd": "ISD loss", "loss/hnb": "HNB loss",
          "loss/cimr": "CIMR loss",
          "loss/all_negative_weight": "all-negative weight w (1: warm-up, all negatives; 0: hardest negative)",
          "grad_norm": "gradient norm (global L2)", "lr": "learning rate", "logit_scale": "logit scale"}
_YLABELS = {"grad_norm": "‖g‖₂", "lr": "learning rate", "logit_scale": "logit scale",
            "loss/all_negative_weight": "w"}
_VAL_PROTOCOLS = {"": "source GT", "folds5": "source GT, 5 folds", "semantic": "semantic GT",
                  "semantic_folds5": "semantic GT, 5 folds"}
_VAL_NAMES = {"rsum": ("validation RSUM", "RSUM"), "i2t_r1": ("validation R@1, image → text", "R@1 (%)"),
              "t2i_r1": ("validation R@1, text → image", "R@1 (%)")}
_VAL_ORDER = ("val/rsum", "val/i2t_r1", "val/t2i_r1")


def _parse_val(key: str) -> tuple[str, str, str]:
    """'val/[score/][protocol/]metric' → (metric, score, protocol)."""
    parts = key.split("/")[1:]
    metric, middle = parts[-1], parts[:-1]
    protocol = middle.pop() if middle and middle[-1] in _VAL_PROTOCOLS else ""
    return metric, "/".join(middle), protocol


def curve_panels(keys) -> list[dict]:
    """The panels of `plot_training_curves`: one per quantity, each {"key", "title", "ylabel", "series": [(metric key,
    legend label)], "val": bool}. A loss's image→text and text→image parts (`loss/X_i2t`, `loss/X_t2i`) share
    `loss/X`'s panel; validation metrics share one panel per metric (RSUM, R@1 each way), one series per score and
    protocol (source / semantic ground truth, full split / 5 folds)."""
    panels: dict[str, dict] = {}
    keys = sorted(keys)
    named_scores = any(_parse_val(k)[1] for k in keys if k.startswith("val/"))
    for key in keys:
        if key.startswith("val/"):
            metric, score, protocol = _parse_val(key)
            title, ylabel = _VAL_NAMES.get(metric, (f"validation {metric}", metric))
            label = (f"{score}: " if score else "run's score: " if named_scores else "") + _VAL_PROTOCOLS[protocol]
            panel = panels.setdefault(f"val/{metric}", {"key": f"val/{metric}", "title": title, "ylabel": ylabel,
                                                        "series": [], "val": True})
            panel["series"].append((key, label))
            continue
        base, label = key, None
        head, _, tail = key.rpartition("_")
        if key.startswith("loss/") and tail in _SERIES_SUFFIX:
            base, label = head, _SERIES_SUFFIX[tail]
        elif key[5:] in _SERIES_SUFFIX and key.startswith("loss/"):  # CLIP's loss/i2t, loss/t2i: parts of the total
            base, label = "loss/total", _SERIES_SUFFIX[key[5:]]
        name = curve_name(base)
        panel = panels.setdefault(base, {"key": base, "title": name, "series": [], "val": False,
                                         "ylabel": _YLABELS.get(base, "loss" if base.startswith("loss/") else base)})
        panel["series"].append((key, label))
    for panel in panels.values():  # the whole loss first, then its directions
        panel["series"].sort(key=lambda s: s[1] is not None)
        if len(panel["series"]) > 1 and panel["series"][0][1] is None:
            panel["series"][0] = (panel["series"][0][0], "both directions" if not panel["val"] else "")

    def order(p):  # total loss, the other losses, the all-negative weight; gradient norm etc.; validation
        k = p["key"]
        if k.startswith("val/"):
            return 2, _VAL_ORDER.index(k) if k in _VAL_ORDER else len(_VAL_ORDER), k
        if k.startswith("loss/"):
            return 0, {"loss/total": 0, "loss/all_negative_weight": 2}.get(k, 1), k
        return 1, 0, k
    return sorted(panels.values(), key=order)


def _series(rows, key):
    pts = sorted((r["step"], float(r[key])) for r in rows
                 if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool))
    return [s for s, _ in pts], [v for _, v in pts]


def switch_steps(steps, weights) -> tuple[float, float] | None:
    """(from, to) steps of the warm-up → hardest-negative switch from the logged all-negative weight (1 during the
    all-negative warm-up, 0 on hardest negatives; a logged value is the mean over its log interval): from the last
    logged step still at 1 (0 if none) to the first at 0 after it (the last logged step if the ramp never ends).
    None when the weight never leaves 1 or is 0 from the first logged step. None entries are skipped."""
    pts = sorted((s, float(w)) for s, w in zip(steps, weights) if w is not None)
    first = next((i for i, (_, w) in enumerate(pts) if w < 1.0), None)
    if first is None or (first == 0 and pts[0][1] <= 0.0):  # never left 1, or no warm-up logged at all
        return None
    start = pts[first - 1][0] if first > 0 else 0
    end = next((pts[i][0] for i in range(first, len(pts)) if pts[i][1] <= 0.0), pts[-1][0])
    return (start, end) if end > start else None


def hard_negative_switch(rows) -> tuple[float, float] | None:
    """`switch_steps` of a metrics.jsonl's `loss/all_negative_weight` rows."""
    return switch_steps(*_series(rows, "loss/all_negative_weight"))


def curve_name(key: str) -> str:
    """A metric key as a reader's name: 'loss/triplet' → 'triplet loss', 'lr' → 'learning rate'."""
    if key.startswith("loss/"):
        return _NAMES.get(key, f"{key[5:]} loss")
    return _NAMES.get(key, key)


def _dedupe(series):
    """Validation series with identical data are drawn once: `val/rsum` (the run's own score) is `val/maxmatch/rsum`
    when the run scores with maxmatch; the series naming its score is kept, marked as the run's score."""
    kept = []
    for item in series:
        twin = next((i for i, k in enumerate(kept) if k[2] == item[2] and k[3] == item[3]), None)
        if twin is None:
            kept.append(item)
            continue
        plain, named = (item, kept[twin]) if not _parse_val(item[0])[1] else (kept[twin], item)
        if _parse_val(plain[0])[1] or not _parse_val(named[0])[1]:
            continue  # two named scores that agree: both labels would be right, keep the first
        metric, score, protocol = _parse_val(named[0])
        kept[twin] = (named[0], f"{score} (the run's score): {_VAL_PROTOCOLS[protocol]}", *named[2:])
    return kept


_PROTOCOL_COLORS = {p: f"C{i}" for i, p in enumerate(_VAL_PROTOCOLS)}
_SCORE_MARKERS = "osD^vP*X"


def _val_style(key: str, scores: list) -> dict:
    _, score, protocol = _parse_val(key)
    return {"color": _PROTOCOL_COLORS[protocol], "marker": _SCORE_MARKERS[scores.index(score) % len(_SCORE_MARKERS)]}


def plot_training_curves(jsonl_path, path, *, keys=None) -> str:
    """One panel per quantity of `keys` (default: `default_curve_keys` of what the file holds) against "step"
    (`curve_panels`), all on one step axis: training values as lines, validation values as points (colour: ground
    truth and protocol, marker: score; one key below the panels), a loss's directions beside it, the warm-up →
    hardest-negative switch (`hard_negative_switch`) shaded in every panel."""
    rows = read_metrics_jsonl(jsonl_path)
    if keys is None:
        keys = default_curve_keys({k for r in rows for k, v in r.items()
                                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)})
    panels = curve_panels(keys) or [{"key": "", "title": "(no metrics)", "ylabel": "", "series": [], "val": False}]
    switch = hard_negative_switch(rows)
    steps_all = [r["step"] for r in rows if isinstance(r.get("step"), (int, float))]
    drawn = []
    for panel in panels:
        series = [(k, label, *_series(rows, k)) for k, label in panel["series"]]
        drawn.append((panel, [s for s in (_dedupe(series) if panel["val"] else series) if s[2]]))
    scores = sorted({_parse_val(s[0])[1] for panel, series in drawn if panel["val"] for s in series})
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = new_figure(nrows, cols, figsize=(4.6 * cols, 3.3 * nrows), squeeze=False)
    val_key = {}
    for ax, (panel, series) in zip(axes.flat, drawn):
        for i, (key, label, steps, values) in enumerate(series):
            if panel["val"]:
                line, = ax.plot(steps, values, ls=":", lw=0.8, ms=5, **_val_style(key, scores))
                _, score, protocol = _parse_val(key)
                val_key.setdefault(label, (score, list(_VAL_PROTOCOLS).index(protocol), line))
            else:
                ax.plot(steps, values, lw=1.2, color=f"C{i % 10}", marker="." if len(steps) < 30 else None,
                        label=label)
        if switch:
            ax.axvspan(*switch, color="tab:red", alpha=0.12, lw=0,
                       label="warm-up → hardest negative" if panel["key"] == "loss/all_negative_weight" else None)
        if steps_all:
            lo, hi = min(steps_all), max(steps_all)
            pad = 0.03 * (hi - lo or 1)
            ax.set_xlim(min(lo, switch[0] if switch else lo) - pad, hi + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(_wrap(panel["title"], 48), fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.set_ylabel(panel["ylabel"], fontsize=9)
        ax.tick_params(labelsize=8)
        if not panel["val"] and ax.get_legend_handles_labels()[1] and (
                len(series) > 1 or panel["key"] == "loss/all_negative_weight"):
            ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    bottom = 0.0
    if len(val_key) > 1:  # one key for every validation panel
        entries = sorted(val_key.items(), key=lambda e: e[1][:2])
        fig.legend([e[1][2] for e in entries], [e[0] for e in entries], loc="lower center",
                   ncol=min(4, len(val_key)), fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0),
                   title="validation points (colour: ground truth and protocol; marker: score)", title_fontsize=8)
        bottom = (0.25 + 0.2 * -(-len(val_key) // 4)) / (3.3 * nrows)
    fig.suptitle(f"Training curves ({os.path.basename(os.path.dirname(os.path.abspath(jsonl_path)))})"
                 + (f"; shaded: warm-up → hardest-negative switch, steps {switch[0]:g}–{switch[1]:g}" if switch
                    else ""), fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 1 - 0.4 / (3.3 * nrows)))
    return _save(fig, path)
