"""PNG figures (matplotlib, Agg backend): element-similarity heatmap (MaxMatch Fig. 4), a 2-D picture of element
embeddings (Fig. 3; PCA by numpy SVD, or a small exact t-SNE for a few hundred points), and training curves from a
metrics JSONL (one JSON object per line with "step" and metric keys; lines without "step" are skipped).

t-SNE here is the plain exact algorithm (perplexity-calibrated Gaussian affinities, Student-t low-dimensional
kernel, early exaggeration 12 for the first 100 of `iters` steps, momentum gradient descent). It is O(n²) and meant
for ≤ ~2 000 points; larger inputs are subsampled (seeded).
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mmjax.jsonl import read_jsonl  # noqa: E402
from mmjax.normalize import unit_normalize  # noqa: E402


def _save(fig, path) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return str(path)


def plot_similarity_heatmap(matrix, path, *, title: str = "mean element similarity (matched pairs)") -> str:
    """K_V × K_T heatmap with the values written in the cells."""
    m = np.asarray(matrix, np.float32)
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * m.shape[1], 0.8 + 0.8 * m.shape[0]))
    im = ax.imshow(m, cmap="viridis")
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", color="w", fontsize=8)
    ax.set_xlabel("caption element j")
    ax.set_ylabel("image element i")
    ax.set_xticks(range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]))
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    return _save(fig, path)


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


def plot_element_embeddings(image_sets, caption_sets, path, *, method: str = "pca", max_sets: int = 100,
                            seed: int = 0) -> str:
    """Scatter of the elements of the first `max_sets` image sets (circles) and caption sets (crosses) in 2-D,
    coloured by element index k (paper Fig. 3)."""
    img = np.asarray(image_sets)[:max_sets]
    txt = np.asarray(caption_sets)[:max_sets]
    pts = np.concatenate([img.reshape(-1, img.shape[-1]), txt.reshape(-1, txt.shape[-1])])
    pts = unit_normalize(pts)
    if method == "pca":
        y = pca_2d(pts)
    elif method == "tsne":
        y = tsne_2d(pts, seed=seed)
    else:
        raise ValueError(f"method must be 'pca' or 'tsne', got {method!r}")
    n_img = img.shape[0] * img.shape[1]
    k_img = np.tile(np.arange(img.shape[1]), img.shape[0])
    k_txt = np.tile(np.arange(txt.shape[1]), txt.shape[0])
    fig, ax = plt.subplots(figsize=(6, 5))
    cmap = plt.get_cmap("tab10")
    ax.scatter(y[:n_img, 0], y[:n_img, 1], c=[cmap(k % 10) for k in k_img], marker="o", s=10, alpha=0.7,
               label="image elements")
    ax.scatter(y[n_img:, 0], y[n_img:, 1], c=[cmap(k % 10) for k in k_txt], marker="x", s=10, alpha=0.7,
               label="caption elements")
    ax.legend(fontsize=8)
    ax.set_title(f"element embeddings ({method}); colour = element index", fontsize=9)
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


def plot_training_curves(jsonl_path, path, *, keys=None) -> str:
    """One subplot per metric of `keys` (default: `default_curve_keys` of what the file holds) against "step"."""
    rows = read_metrics_jsonl(jsonl_path)
    if keys is None:
        keys = default_curve_keys({k for r in rows for k, v in r.items()
                                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)})
    keys = list(keys) or ["(no metrics)"]
    cols = min(3, len(keys))
    nrows = -(-len(keys) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if pts:
            steps, values = zip(*pts)
            ax.plot(steps, values, marker="." if len(pts) < 50 else None)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    return _save(fig, path)
