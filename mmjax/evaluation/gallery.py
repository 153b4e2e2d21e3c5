"""Qualitative retrieval gallery: the top-k answers of a few queries, with the correct ones marked.

From an image × caption score matrix S [n_images, n_captions] (any scorer: `mmjax.evaluation.score_sets`, a CLIP
cosine matrix, a Flow-CLIP head):

    text → image   ranked = top-k images of column S[:, q], best first
    image → text   ranked = top-k captions of row S[q, :], best first

Order is by descending score with ties broken by the lower index (a stable sort), so the gallery is deterministic.
A candidate is **correct** when it is a source ground truth (the caption's own image / the image's own captions,
`caption_to_image`) and **also true** when an optional `positives` matrix [n_captions, n_images] (ShapesWorld's
`retrieval_suite(...)['semantic']`: the caption is true on that image) says so without it being the source.
`gt_rank` is the 0-based rank of the best source ground truth under the strict tie policy of
`mmjax.evaluation.retrieval` (#{wrong candidates scoring ≥ it}), so `gt_rank < 5` ⇔ the query counts for R@5.

`plot_gallery` draws one row per query: for text → image the query caption then k images framed green (correct),
orange (also true) or light gray; for image → text the query image then k captions framed the same way.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Sequence

import numpy as np

CORRECT_RGB = (40, 170, 60)
ALSO_TRUE_RGB = (245, 140, 30)
OTHER_RGB = (215, 215, 215)


@dataclasses.dataclass(frozen=True)
class Ranking:
    """Top-k answers of one query (module docstring)."""

    direction: str  # 't2i' | 'i2t'
    query: int  # caption index (t2i) or image index (i2t)
    ranked: np.ndarray  # int [k] candidate indices, best first
    scores: np.ndarray  # float [k]
    correct: np.ndarray  # bool [k] source ground truth
    also_true: np.ndarray  # bool [k] semantic positive that is not the source
    gt_rank: int  # 0-based strict rank of the best source ground truth


def _check(similarity, caption_to_image, positives):
    s = np.asarray(similarity, np.float32)
    c2i = np.asarray(caption_to_image, np.int64)
    if s.ndim != 2:
        raise ValueError(f"similarity must be [n_images, n_captions], got shape {s.shape}")
    if c2i.shape != (s.shape[1],):
        raise ValueError(f"caption_to_image must have shape ({s.shape[1]},), got {c2i.shape}")
    if c2i.size and (c2i.min() < 0 or c2i.max() >= s.shape[0]):
        raise ValueError(f"caption_to_image values must index the {s.shape[0]} images")
    if not np.all(np.isfinite(s)):
        raise ValueError("similarity contains non-finite values")
    pos = None
    if positives is not None:
        pos = np.asarray(positives, bool)
        if pos.shape != (s.shape[1], s.shape[0]):
            raise ValueError(f"positives must be [n_captions, n_images] = {(s.shape[1], s.shape[0])}, "
                             f"got {pos.shape}")
    return s, c2i, pos


def _rank(scores: np.ndarray, gt: np.ndarray, semantic: np.ndarray | None, k: int, direction: str, query: int):
    order = np.argsort(-scores, kind="stable")[:k]
    best_gt = scores[gt].max()
    gt_rank = int(np.sum((scores >= best_gt) & ~gt))
    also = np.zeros(len(order), bool) if semantic is None else semantic[order] & ~gt[order]
    return Ranking(direction, query, order, scores[order], gt[order], also, gt_rank)


def rank_images(similarity, caption: int, caption_to_image, *, k: int = 5, positives=None) -> Ranking:
    """Top-k images for caption `caption` (text → image)."""
    s, c2i, pos = _check(similarity, caption_to_image, positives)
    if not 0 <= caption < s.shape[1]:
        raise IndexError(f"caption {caption} out of range for {s.shape[1]} captions")
    gt = np.arange(s.shape[0]) == c2i[caption]
    return _rank(s[:, caption], gt, None if pos is None else pos[caption], min(k, s.shape[0]), "t2i", caption)


def rank_captions(similarity, image: int, caption_to_image, *, k: int = 5, positives=None) -> Ranking:
    """Top-k captions for image `image` (image → text)."""
    s, c2i, pos = _check(similarity, caption_to_image, positives)
    if not 0 <= image < s.shape[0]:
        raise IndexError(f"image {image} out of range for {s.shape[0]} images")
    gt = c2i == image
    if not gt.any():
        raise ValueError(f"image {image} has no caption in caption_to_image")
    return _rank(s[image], gt, None if pos is None else pos[:, image], min(k, s.shape[1]), "i2t", image)


def frame(image, rgb, width: int = 3) -> np.ndarray:
    """uint8 image padded by a `width`-pixel border of colour `rgb` (the picture itself is untouched)."""
    img = np.asarray(image, np.uint8)
    if img.ndim != 3 or img.shape[-1] != 3:
        raise ValueError(f"frame: image must be [H, W, 3], got shape {img.shape}")
    out = np.empty((img.shape[0] + 2 * width, img.shape[1] + 2 * width, 3), np.uint8)
    out[:] = np.asarray(rgb, np.uint8)
    out[width:width + img.shape[0], width:width + img.shape[1]] = img
    return out


def _mark(correct: bool, also: bool):
    return CORRECT_RGB if correct else ALSO_TRUE_RGB if also else OTHER_RGB


def plot_gallery(similarity, caption_to_image, captions: Sequence[str], image_fn: Callable[[int], np.ndarray], *,
                 caption_queries: Sequence[int] = (), image_queries: Sequence[int] = (), k: int = 5,
                 positives=None, title: str | None = None, panel_inches: float = 1.7):
    """(matplotlib Figure, list of `Ranking`): one row per query, caption queries first (module docstring).

    `captions[n]` is the text of caption n; `image_fn(i)` returns image i as uint8 [H, W, 3] (e.g.
    `functools.partial(mmjax.data.shapesworld.draw.scene_image, data)`).
    """
    import matplotlib.pyplot as plt

    if len(captions) != np.shape(similarity)[1]:
        raise ValueError(f"captions has {len(captions)} entries, similarity has {np.shape(similarity)[1]} columns")
    rankings = [rank_images(similarity, q, caption_to_image, k=k, positives=positives) for q in caption_queries]
    rankings += [rank_captions(similarity, q, caption_to_image, k=k, positives=positives) for q in image_queries]
    if not rankings:
        raise ValueError("plot_gallery: give at least one caption or image query")
    cols = 1 + max(len(r.ranked) for r in rankings)
    fig, axes = plt.subplots(len(rankings), cols, figsize=(panel_inches * cols, 1.25 * panel_inches * len(rankings)),
                             squeeze=False)
    for row, r in zip(axes, rankings):
        for ax in row:
            ax.set_xticks([])
            ax.set_yticks([])
        head = row[0]
        if r.direction == "t2i":
            head.text(0.5, 0.5, textwrap.fill(captions[r.query], 18), ha="center", va="center", fontsize=7,
                      transform=head.transAxes)
            head.set_title(f"caption {r.query}\nGT rank {r.gt_rank + 1}", fontsize=7)
        else:
            head.imshow(np.asarray(image_fn(r.query), np.uint8), interpolation="nearest")
            head.set_title(f"image {r.query}\nGT rank {r.gt_rank + 1}", fontsize=7)
        for j, ax in enumerate(row[1:]):
            if j >= len(r.ranked):
                ax.axis("off")
                continue
            rgb = _mark(bool(r.correct[j]), bool(r.also_true[j]))
            cand = int(r.ranked[j])
            if r.direction == "t2i":
                ax.imshow(frame(image_fn(cand), rgb), interpolation="nearest")
                ax.set_title(f"#{j + 1} img {cand}\ns={r.scores[j]:.3f}", fontsize=7)
            else:
                ax.text(0.5, 0.5, textwrap.fill(captions[cand], 18), ha="center", va="center", fontsize=7,
                        color=np.asarray(rgb) / 255 if rgb != OTHER_RGB else "black", transform=ax.transAxes)
                for spine in ax.spines.values():
                    spine.set_edgecolor(np.asarray(rgb) / 255)
                    spine.set_linewidth(3)
                ax.set_title(f"#{j + 1} cap {cand}\ns={r.scores[j]:.3f}", fontsize=7)
    fig.suptitle(title or "retrieval gallery: green = ground truth, orange = also true, gray = wrong", fontsize=9)
    fig.tight_layout()
    return fig, rankings
