"""Ranking losses over an all-pairs score matrix S[i, n] (image i, caption n) with multi-positive caption sets.

Positives: Y[i, n] = 1 iff caption n belongs to image i (`caption_image[n] == i`, or equal `image_ids` when the same
image can appear twice in a batch). Each caption's anchor pair is (caption_image[n], n) with score s_n.

Triplet, hardest negative (`hard_negative='max'`, Set Div / VSE++ `max_violation`):

    L_i2t = (1/N_t) Σ_n [δ + max_{n': Y[i_n, n'] = 0} S[i_n, n'] − s_n]_+       (i_n = caption_image[n])
    L_t2i = (1/N_t) Σ_n [δ + max_{i': Y[i', n] = 0} S[i', n] − s_n]_+
    L_tri = L_i2t + L_t2i

VSE0 warm-up (`hard_negative='all'`): the max is replaced by all negatives, averaged over (anchor, negative) pairs
(`reduction='mean'`, Set Div) or summed (`'sum'`, the VSE∞ convention). Its image-to-text numerator

    H = Σ_n a_n Σ_m N[i_n, m] · [δ + S[i_n, m] − s_n]_+        (a_n: anchor n valid; N: the negative mask)

pairs every anchor with its image's whole row, an [N_t, N_t] matrix when formed at once; `anchor_hinge_sum` (a
callable with `dense_anchor_hinge_sum`'s signature) computes it another way — `AllPairsLayout('rows')` streams it
per device over its own rows (`mmjax.sharded_similarity.sharded_anchor_hinge_sum`). The denominator needs no
pairs: Σ_n a_n · |{m: N[i_n, m]}|.

Symmetric multi-positive InfoNCE over Z = S/τ:

    L^{i2t} = −(1/N_i) Σ_i log( Σ_n Y[i,n] e^{Z[i,n]} / Σ_n e^{Z[i,n]} )
    L^{t2i} = −(1/N_t) Σ_n log( Σ_i Y[i,n] e^{Z[i,n]} / Σ_i e^{Z[i,n]} )
    L_con   = ½ (L^{i2t} + L^{t2i})

Optional `ignore_pairs[N_i, N_t]` (bool) marks pairs that are neither negatives nor positives: a caption true of
another image of the batch than its own (ShapesWorld's in-batch false negatives, `loss.false_negatives='ignore'`).
They leave N (every max and every all-negative sum) and InfoNCE's denominators; positives (Y) are never ignored.

Optional `image_valid[N_i]` / `caption_valid[N_t]` drop padded examples from anchors and negatives alike: their
scores are replaced with `jnp.where` before any reduction, so a NaN score of a padded example (e.g. an empty set's,
`mmjax.similarity`) reaches neither the loss nor the gradients.

Indices: `caption_image[n]` must lie in [0, N_i) (a negative index would wrap to the last image and one past the
batch would read a NaN fill). Concrete indices (numpy arrays, lists, concrete jax arrays) are checked eagerly and an
out-of-range one raises ValueError naming the argument, the value and the range; traced indices (under `jax.jit`,
`grad`, `vmap`) cannot be inspected, are not checked and cost nothing extra — check them on the host before the step.
"""

import jax
import jax.numpy as jnp
import numpy as np

_NEG = -1e9


def check_indices(indices, upper: int, name: str = "caption_image", what: str = "images") -> None:
    """Raise ValueError unless every concrete index lies in [0, upper); traced indices (under jit) are skipped.

    Runs on the host, only for concrete values (numpy arrays, lists, concrete jax arrays): nothing is added to a
    jitted computation."""
    if isinstance(indices, jax.core.Tracer):
        return
    idx = np.asarray(indices)
    if idx.size == 0 or idx.dtype.kind not in "iu":
        return  # empty, or not integers (indexing refuses those itself)
    bad = (idx < 0) | (idx >= upper)
    if bad.any():
        pos = tuple(int(p) for p in np.argwhere(bad)[0])
        where = pos[0] if len(pos) == 1 else pos
        raise ValueError(f"{name}[{where}] = {int(idx[pos])} is out of range [0, {upper}) ({upper} {what}; "
                         f"{int(bad.sum())} of {idx.size} indices out of range)")


def positive_mask(caption_image, num_images: int, image_ids=None):
    """Y bool[N_i, N_t]. Concrete `caption_image` must lie in [0, num_images) ([0, len(image_ids)) with
    `image_ids`); ValueError otherwise (module docstring; traced indices are not checked)."""
    check_indices(caption_image, num_images if image_ids is None else int(np.shape(image_ids)[0]))
    return _positive_mask(jnp.asarray(caption_image), num_images, image_ids)


def _positive_mask(caption_image, num_images: int, image_ids=None):
    if image_ids is None:
        return caption_image[None, :] == jnp.arange(num_images)[:, None]
    image_ids = jnp.asarray(image_ids)
    return image_ids[:, None] == image_ids[caption_image][None, :]


def _check(scores, caption_image, image_ids, ignore_pairs=None):
    # np.shape: the indices may be a list (jnp.shape of a list is deprecated), a numpy array, a jax array or a tracer
    if scores.ndim != 2:
        raise ValueError(f"scores must be [N_images, N_captions], got shape {scores.shape}")
    if np.shape(caption_image) != (scores.shape[1],):
        raise ValueError(f"caption_image must have shape ({scores.shape[1]},) (one image index per caption), "
                         f"got {np.shape(caption_image)}")
    if image_ids is not None and np.shape(image_ids) != (scores.shape[0],):
        raise ValueError(f"image_ids must have shape ({scores.shape[0]},), got {np.shape(image_ids)}")
    if ignore_pairs is not None and np.shape(ignore_pairs) != scores.shape:
        raise ValueError(f"ignore_pairs must have the scores' shape {scores.shape} ([N_images, N_captions]), "
                         f"got {np.shape(ignore_pairs)}")
    check_indices(caption_image, scores.shape[0])


def _negatives(y, iv, cv, ignore_pairs):
    neg = ~y & iv[:, None] & cv[None, :]
    return neg if ignore_pairs is None else neg & ~jnp.asarray(ignore_pairs, bool)


def _valid(n, mask):
    return jnp.ones((n,), bool) if mask is None else jnp.asarray(mask, bool)


def _mean(x, w):
    return jnp.sum(jnp.where(w, x, 0.0)) / jnp.maximum(jnp.sum(w), 1)


def dense_anchor_hinge_sum(scores, neg, caption_image, s_pos, anchor, margin):
    """H = Σ_n a_n Σ_m N[i_n, m] [δ + S[i_n, m] − s_n]_+ with the rows S[i_n, :] gathered as one [N_t, N_t] matrix
    (module docstring)."""
    w = neg[caption_image] & anchor[:, None]
    return jnp.sum(jnp.where(w, jax.nn.relu(margin + scores[caption_image] - s_pos[:, None]), 0.0))


def triplet_loss(scores, caption_image, *, margin: float = 0.2, hard_negative: str = "max",
                 reduction: str = "mean", image_ids=None, image_valid=None, caption_valid=None,
                 anchor_hinge_sum=None, ignore_pairs=None):
    """Bidirectional triplet ranking loss (module docstring). Returns (loss, {"i2t", "t2i"}). `anchor_hinge_sum`:
    how the all-negative form's image-to-text sum H is computed (None: the [N_t, N_t] rows at once).

    Concrete `caption_image` outside [0, N_images) raises ValueError; under jit (traced) it cannot be checked."""
    scores = jnp.asarray(scores, jnp.float32)
    _check(scores, caption_image, image_ids, ignore_pairs)
    caption_image = jnp.asarray(caption_image)
    if hard_negative not in ("max", "all"):
        raise ValueError(f"hard_negative must be 'max' or 'all', got {hard_negative!r}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    n_i, n_t = scores.shape
    iv, cv = _valid(n_i, image_valid), _valid(n_t, caption_valid)
    y = _positive_mask(caption_image, n_i, image_ids)
    neg = _negatives(y, iv, cv, ignore_pairs)
    anchor = cv & iv[caption_image]
    s_pos = jnp.take_along_axis(scores, caption_image[None, :], axis=0)[0]       # s_n
    if hard_negative == "max":
        # The hardest negative caption of anchor n is that of its image i_n: one max per image row, then indexed
        # by caption (never the [N_t, N_t] matrix S[i_n, :], which at a global batch of B images is 25·B² floats).
        negatives = jnp.where(neg, scores, _NEG)
        hardest_caption = jnp.max(negatives, axis=1)[caption_image]
        hardest_image = jnp.max(negatives, axis=0)
        i2t = jnp.where(jnp.any(neg, 1)[caption_image], jax.nn.relu(margin + hardest_caption - s_pos), 0.0)
        t2i = jnp.where(jnp.any(neg, 0), jax.nn.relu(margin + hardest_image - s_pos), 0.0)
        if reduction == "mean":
            i2t, t2i = _mean(i2t, anchor), _mean(t2i, anchor)
        else:
            i2t, t2i = jnp.sum(jnp.where(anchor, i2t, 0.0)), jnp.sum(jnp.where(anchor, t2i, 0.0))
    else:
        i2t = (anchor_hinge_sum or dense_anchor_hinge_sum)(scores, neg, caption_image, s_pos, anchor, margin)
        w_t2i = neg & anchor[None, :]
        t2i = jnp.sum(jnp.where(w_t2i, jax.nn.relu(margin + scores - s_pos[None, :]), 0.0))
        if reduction == "mean":
            pairs_i2t = jnp.sum(jnp.where(anchor, jnp.sum(neg, 1)[caption_image], 0))   # Σ_n a_n |N[i_n, :]|
            i2t, t2i = i2t / jnp.maximum(pairs_i2t, 1), t2i / jnp.maximum(jnp.sum(w_t2i), 1)
    return i2t + t2i, {"i2t": i2t, "t2i": t2i}


def infonce_loss(scores, caption_image, *, temperature: float = 0.05, image_ids=None, image_valid=None,
                 caption_valid=None, ignore_pairs=None):
    """Symmetric multi-positive InfoNCE (module docstring). Returns (loss, {"i2t", "t2i"}).

    Concrete `caption_image` outside [0, N_images) raises ValueError; under jit (traced) it cannot be checked."""
    scores = jnp.asarray(scores, jnp.float32)
    _check(scores, caption_image, image_ids, ignore_pairs)
    caption_image = jnp.asarray(caption_image)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    n_i, n_t = scores.shape
    iv, cv = _valid(n_i, image_valid), _valid(n_t, caption_valid)
    y = _positive_mask(caption_image, n_i, image_ids) & iv[:, None] & cv[None, :]
    counted = y | _negatives(y, iv, cv, ignore_pairs)   # the denominators: positives and negatives
    z = scores / temperature
    lse = lambda x, m, ax: jax.nn.logsumexp(jnp.where(m, x, _NEG), axis=ax)
    i2t_terms = lse(z, counted, 1) - lse(z, y, 1)
    t2i_terms = lse(z, counted, 0) - lse(z, y, 0)
    i2t = _mean(i2t_terms, iv & jnp.any(y, 1))
    t2i = _mean(t2i_terms, cv & jnp.any(y, 0))
    return 0.5 * (i2t + t2i), {"i2t": i2t, "t2i": t2i}
