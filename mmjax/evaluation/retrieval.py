"""Cross-modal retrieval metrics from an image × caption similarity matrix.

Ranks (0-based, ties counted against the ground truth — the strict policy):

    I2T  rank_i = #{captions n' not of image i : S[i, n'] ≥ max_{n of image i} S[i, n]}   (best of its c captions)
    T2I  rank_n = #{images i' ≠ img(n) : S[i', n] ≥ S[img(n), n]}

Semantic ground truth (ShapesWorld, where a caption such as "a small gray triangle" is true of many images): a bool
matrix P [n_images, n_captions] of every (image, caption) pair on which the caption is true replaces "of image i" /
"img(n)" — the best-scoring positive is ranked among the non-positives:

    I2T  rank_i = #{n' : ¬P[i, n'], S[i, n'] ≥ max_{n : P[i, n]} S[i, n]}
    T2I  rank_n = #{i' : ¬P[i', n], S[i', n] ≥ max_{i : P[i, n]} S[i, n]}

(the source ground truth is the P with P[i, n] = [img(n) = i]; P must hold it).

R@K = 100 · mean(rank < K) per direction; RSUM = Σ_{K ∈ 1,5,10} (I2T R@K + T2I R@K); median/mean rank are 1-based
(Set Div `eval.py` conventions). COCO 1K / Flickr30k-style folds: images split into `n_folds` contiguous blocks with
their captions; every metric is averaged over folds (so RSUM of the averaged recalls = average of the fold RSUMs).

Ranks are computed on device in row chunks, so a 5 000 × 25 000 matrix never needs more than one chunk of booleans.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

KEYS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum",
        "i2t_medr", "i2t_meanr", "t2i_medr", "t2i_meanr")
RECALL_KEYS = KEYS[:7]  # R@1/5/10 both ways and RSUM: the columns of every retrieval table


@functools.partial(jax.jit, static_argnames=("chunk",))
def _ranks(sim, caption_to_image, chunk: int):
    n_i, n_t = sim.shape
    img_idx = jnp.arange(n_i)
    # T2I: score of each caption's own image, compared against every image (columns are independent).
    own = sim[caption_to_image, jnp.arange(n_t)]
    t2i = jnp.sum((sim >= own[None, :]) & (img_idx[:, None] != caption_to_image[None, :]), axis=0)
    # I2T in row chunks: best ground-truth caption per image, then count non-GT captions scoring at least that.
    pad = (-n_i) % chunk
    sim_p = jnp.pad(sim, ((0, pad), (0, 0)))
    rows_p = jnp.pad(img_idx, (0, pad), constant_values=-1)

    def chunk_ranks(args):
        s, rows = args
        gt = rows[:, None] == caption_to_image[None, :]
        best = jnp.max(jnp.where(gt, s, -jnp.inf), axis=1)
        return jnp.sum((s >= best[:, None]) & ~gt, axis=1)

    i2t = jax.lax.map(chunk_ranks, (sim_p.reshape(-1, chunk, n_t), rows_p.reshape(-1, chunk)))
    return i2t.reshape(-1)[:n_i], t2i


@functools.partial(jax.jit, static_argnames=("chunk",))
def _ranks_positives(sim, positives, chunk: int):
    """Ranks against a positive relation P [n_images, n_captions] (module docstring), I2T in row chunks."""
    n_i, n_t = sim.shape
    best_t2i = jnp.max(jnp.where(positives, sim, -jnp.inf), axis=0)
    t2i = jnp.sum((sim >= best_t2i[None, :]) & ~positives, axis=0)
    pad = (-n_i) % chunk
    sim_p = jnp.pad(sim, ((0, pad), (0, 0)))
    pos_p = jnp.pad(positives, ((0, pad), (0, 0)), constant_values=True)  # padded rows: sliced off below

    def chunk_ranks(args):
        s, pos = args
        best = jnp.max(jnp.where(pos, s, -jnp.inf), axis=1)
        return jnp.sum((s >= best[:, None]) & ~pos, axis=1)

    i2t = jax.lax.map(chunk_ranks, (sim_p.reshape(-1, chunk, n_t), pos_p.reshape(-1, chunk, n_t)))
    return i2t.reshape(-1)[:n_i], t2i


def _check(similarity, caption_to_image):
    if similarity.ndim != 2:
        raise ValueError(f"similarity must be [n_images, n_captions], got shape {similarity.shape}")
    if caption_to_image.shape != (similarity.shape[1],):
        raise ValueError(f"caption_to_image must have shape ({similarity.shape[1]},), got {caption_to_image.shape}")
    if caption_to_image.size and (caption_to_image.min() < 0 or caption_to_image.max() >= similarity.shape[0]):
        raise ValueError(f"caption_to_image values must index the {similarity.shape[0]} images, got range "
                         f"[{caption_to_image.min()}, {caption_to_image.max()}]")
    missing = np.setdiff1d(np.arange(similarity.shape[0]), caption_to_image)
    if missing.size:
        raise ValueError(f"{missing.size} image(s) have no caption (first: {missing[:5].tolist()}); I2T rank undefined")
    if not np.all(np.isfinite(similarity)):
        raise ValueError("similarity contains non-finite values")


def _check_positives(positives, similarity, caption_to_image) -> np.ndarray:
    positives = np.asarray(positives)
    if positives.dtype != bool or positives.shape != similarity.shape:
        raise ValueError(f"positives must be bool [n_images, n_captions] = {similarity.shape}, got "
                         f"{positives.dtype} {positives.shape}")
    if not positives[caption_to_image, np.arange(len(caption_to_image))].all():
        raise ValueError("positives must include every caption's source image (P[img(n), n] = True)")
    return positives


def retrieval_ranks(similarity, caption_to_image, *, positives=None, chunk: int = 256):
    """(i2t_ranks int[n_images], t2i_ranks int[n_captions]), 0-based, strict ties; against the source ground truth,
    or the semantic one when `positives` (bool [n_images, n_captions]) is given."""
    similarity = np.asarray(similarity, np.float32)
    caption_to_image = np.asarray(caption_to_image, np.int32)
    _check(similarity, caption_to_image)
    chunk = max(1, min(chunk, similarity.shape[0]))
    if positives is None:
        i2t, t2i = _ranks(jnp.asarray(similarity), jnp.asarray(caption_to_image), chunk)
    else:
        positives = _check_positives(positives, similarity, caption_to_image)
        i2t, t2i = _ranks_positives(jnp.asarray(similarity), jnp.asarray(positives), chunk)
    return np.asarray(i2t), np.asarray(t2i)


def metrics_from_ranks(i2t, t2i) -> dict:
    out = {}
    for name, r in (("i2t", i2t), ("t2i", t2i)):
        for k in (1, 5, 10):
            out[f"{name}_r{k}"] = float(100.0 * np.mean(r < k))
        out[f"{name}_medr"] = float(np.floor(np.median(r)) + 1)
        out[f"{name}_meanr"] = float(np.mean(r) + 1)
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    return {k: out[k] for k in KEYS}


def recall_at_k(similarity, caption_to_image, *, positives=None, chunk: int = 256) -> dict:
    """R@1/5/10 in both directions (percent), RSUM, median and mean rank (module docstring); `positives`: the
    semantic ground truth (bool [n_images, n_captions]), None for the source one."""
    return metrics_from_ranks(*retrieval_ranks(similarity, caption_to_image, positives=positives, chunk=chunk))


def recall_at_k_folds(similarity, caption_to_image, n_folds: int = 5, *, positives=None, chunk: int = 256) -> dict:
    """Metrics averaged over `n_folds` contiguous image folds (COCO 1K = 5 folds of the 5K test set); with
    `positives`, each fold keeps the semantic positives among its own images and captions."""
    similarity = np.asarray(similarity, np.float32)
    caption_to_image = np.asarray(caption_to_image, np.int64)
    n_i = similarity.shape[0]
    if n_i % n_folds:
        raise ValueError(f"{n_i} images do not split into {n_folds} equal folds")
    size = n_i // n_folds
    folds = []
    for f in range(n_folds):
        caps = np.flatnonzero((caption_to_image >= f * size) & (caption_to_image < (f + 1) * size))
        fold_pos = None if positives is None else np.asarray(positives)[f * size:(f + 1) * size][:, caps]
        folds.append(recall_at_k(similarity[f * size:(f + 1) * size][:, caps], caption_to_image[caps] - f * size,
                                 positives=fold_pos, chunk=chunk))
    return {k: float(np.mean([m[k] for m in folds])) for k in KEYS}
