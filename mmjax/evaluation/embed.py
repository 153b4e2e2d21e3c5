"""Embed each modality once, then score every image set against every caption set in tiles.

Embedding (`mmjax.batching.batched_apply`): one jitted call per fixed-size batch; the last batch is padded with
copies of the last row (edge padding keeps masked towers finite) and the padding is sliced off again, so a data set
of any size compiles the embedding function exactly once.

Scoring (`score_sets`): S[i, n] = s(V_i, T_n) for a set similarity `kind` of `mmjax.similarity` (e.g. `'maxmatch'`
exact assignment S_H, `'maxmatch_topk'` inference, `'smooth_chamfer'`, `'mil'`). The host loops over image chunks of
`image_chunk` sets; inside one jitted call the captions are split into tiles of `caption_tile` sets and reduced under
`lax.map` (one tile: no map), so peak device memory is O(image_chunk · caption_tile · K_V · K_T) floats while the
cosine matmul of each tile is one (image_chunk·K_V) × (caption_tile·K_T) GEMM. COCO 5K (5 000 × 25 000 sets, K = 4)
therefore never holds more than one tile of blocks (defaults 256 × 32 768: all 25 000 captions in one tile,
256·25 000·16 floats ≈ 0.4 GB; on CPU a `lax.map` over several caption tiles runs ~1.5× slower than one big GEMM, so
prefer one tile when it fits); the [n_images, n_captions] float32 score matrix (500 MB) lives on the host.

`evaluate_retrieval` turns the score matrix into R@1/5/10 both ways, RSUM and median/mean ranks
(`mmjax.evaluation.retrieval`), over the whole set ("all", e.g. COCO 5K) and as the mean of equal contiguous image
folds ("folds5", COCO 1K), for each requested similarity kind (MaxMatch: both `'maxmatch_topk'` and `'maxmatch'`).

Kinds covered by `mmjax.similarity.slab_supported` (`maxmatch_topk`; `maxmatch` with the enumerate solver, K ≤ 5)
run in the element-major slab form: one GEMM, then one fused elementwise pass over the K_V·K_T cell slabs
(docs/design.md#all-pairs-similarity).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.batching import batched_apply, pad_rows, progress
from mmjax.evaluation.retrieval import recall_at_k, recall_at_k_folds
from mmjax.similarity import pairwise_set_similarity, slab_cosines, slab_similarity, slab_supported

log = logging.getLogger(__name__)


def embed_retrieval_model(model, variables, images, image_mask, captions, caption_mask, *,
                          batch_size: int = 256) -> tuple[dict, dict]:
    """Image and caption set dicts ({"set", "mask", "global", ...} as numpy) of a `SetRetrievalModel` in eval mode."""
    def embed_images(x, m):
        return model.apply(variables, x, m, method="embed_images")

    def embed_captions(ids, m):
        return model.apply(variables, ids, m, method="embed_captions")

    img = batched_apply(embed_images, (images, image_mask), batch_size=batch_size, name="[eval] embed images")
    txt = batched_apply(embed_captions, (captions, caption_mask), batch_size=batch_size, name="[eval] embed captions")
    return keep_set_arrays(img), keep_set_arrays(txt)


def keep_set_arrays(out: dict) -> dict:
    # Towers may return auxiliary entries (attention maps); evaluation needs only the arrays named below.
    return {k: v for k, v in out.items() if k in ("set", "mask", "global", "residual") and v is not None}


@functools.partial(jax.jit, static_argnames=("kind", "kw_items", "slabs"))
def _score_chunk(a, a_mask, b_tiles, b_mask_tiles, kind, kw_items, slabs):
    """Scores [image_chunk, n_tiles·caption_tile]; caption tiles are element-major [n_tiles, K_T, tile, D] when
    `slabs` (see `mmjax.similarity.slab_similarity`), else [n_tiles, tile, K_T, D]. Masks may be None (all valid)."""
    kw = _thaw(kw_items)

    def tile(args):
        b, bm = args
        if slabs:
            return slab_similarity(slab_cosines(a, b), kind, a_mask, bm, **kw)
        return pairwise_set_similarity(a, b, kind, a_mask, bm, **kw)

    if b_tiles.shape[0] == 1:  # one tile: no loop, whose per-iteration slice would copy the whole tile
        return tile(jax.tree_util.tree_map(lambda x: x[0], (b_tiles, b_mask_tiles)))
    scores = jax.lax.map(tile, (b_tiles, b_mask_tiles))  # [n_tiles, image_chunk, caption_tile]
    return scores.transpose(1, 0, 2).reshape(a.shape[0], -1)


_element_major_tiles = jax.jit(lambda t: jnp.swapaxes(t, 1, 2))  # [n, tile, K, D] → [n, K, tile, D], on device


class _Frozen(tuple):
    """A dict option frozen into sorted (key, value) pairs, so it can be a static jit argument and thawed back."""


def _freeze(kw: dict) -> tuple:
    def frozen(v):
        return _Frozen(sorted((k, frozen(x)) for k, x in v.items())) if isinstance(v, dict) else v
    return tuple(sorted((k, frozen(v)) for k, v in kw.items()))


def _thaw(items: tuple) -> dict:
    def thawed(v):
        return {k: thawed(x) for k, x in v} if isinstance(v, _Frozen) else v
    return {k: thawed(v) for k, v in items}


def score_sets(a, b, kind: str, a_mask=None, b_mask=None, *, image_chunk: int = 256, caption_tile: int = 32768,
               name: str | None = None, **kw) -> np.ndarray:
    """Scores float32 [Ba, Bb] between sets a [Ba, K_V, D] and b [Bb, K_T, D] (see module docstring).

    Equals `pairwise_set_similarity(a, b, kind, a_mask, b_mask, **kw)`; `kw` are its options (`s_h`, `alpha`,
    `solver`, `topk_k`, ...). Padded image rows / caption tiles are sliced off. Kinds and options that
    `mmjax.similarity.slab_supported` covers (MaxMatch top-k; exact S_H with the enumerate solver, K ≤ 5) run in the
    element-major slab form, whose set reduction is one fused pass after the GEMM; all-true masks are dropped.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError(f"sets must be [B, K, D]; got {a.shape} and {b.shape}")
    for name_, mask, x in (("a_mask", a_mask, a), ("b_mask", b_mask, b)):
        if mask is not None and np.shape(mask) != x.shape[:2]:
            raise ValueError(f"{name_} must have shape {x.shape[:2]} to match its set, got {np.shape(mask)}")
    # An all-valid mask is the same as no mask; dropping it lets the reduction skip the mask logic.
    a_mask = None if a_mask is None or np.all(a_mask) else np.asarray(a_mask, bool)
    b_mask = None if b_mask is None or np.all(b_mask) else np.asarray(b_mask, bool)
    ba, bb = a.shape[0], b.shape[0]
    image_chunk = max(1, min(image_chunk, ba))
    caption_tile = max(1, min(caption_tile, bb))
    n_tiles = math.ceil(bb / caption_tile)
    slabs = slab_supported(kind, a.shape[1], b.shape[1], **kw)
    b_tiles = jnp.asarray(pad_rows(b, n_tiles * caption_tile).reshape((n_tiles, caption_tile) + b.shape[1:]))
    if slabs:  # element-major caption tiles, transposed once per call rather than once per image chunk
        b_tiles = _element_major_tiles(b_tiles)
    bm_tiles = None if b_mask is None else jnp.asarray(
        pad_rows(b_mask, n_tiles * caption_tile).reshape(n_tiles, caption_tile, -1))
    kw_items = _freeze(kw)
    out = np.empty((ba, bb), np.float32)
    bar = progress(ba, name or f"[eval] score {kind}", unit="image")
    for start in range(0, ba, image_chunk):
        stop = min(start + image_chunk, ba)
        chunk_mask = None if a_mask is None else jnp.asarray(pad_rows(a_mask[start:stop], image_chunk))
        chunk = _score_chunk(jnp.asarray(pad_rows(a[start:stop], image_chunk)), chunk_mask, b_tiles, bm_tiles,
                             kind, kw_items, slabs)
        out[start:stop] = np.asarray(chunk)[:stop - start, :bb]
        bar.update(stop - start)
    bar.close()
    return out


def evaluate_retrieval(image_sets: dict, caption_sets: dict, caption_to_image, *,
                       kinds: Sequence[str] = ("maxmatch_topk", "maxmatch"), fold_counts: Sequence[int] = (1, 5),
                       similarity_kw: dict | None = None, image_chunk: int = 256, caption_tile: int = 32768,
                       return_scores: bool = False) -> dict:
    """R@K metrics per similarity kind and protocol.

    Args:
      image_sets / caption_sets: {"set": [N, K, D], "mask": [N, K] (optional)} (outputs of `embed_retrieval_model`).
      caption_to_image: int [n_captions].
      kinds: similarity kinds to report (MaxMatch: `'maxmatch_topk'` = paper inference, `'maxmatch'` = exact S_H).
      fold_counts: 1 → whole set ("all": COCO 5K / Flickr 1K); 5 → mean over 5 contiguous folds ("folds5": COCO 1K).
        Counts that do not divide the number of images are skipped with a warning.
    Returns:
      {kind: {"all": metrics, "folds5": metrics, ...}}, plus {"scores": {kind: array}} when `return_scores`.
    """
    c2i = np.asarray(caption_to_image, np.int64)
    n_images = image_sets["set"].shape[0]
    results, scores = {}, {}
    for kind in kinds:
        t0 = time.perf_counter()
        sim = score_sets(image_sets["set"], caption_sets["set"], kind, image_sets.get("mask"),
                         caption_sets.get("mask"), image_chunk=image_chunk, caption_tile=caption_tile,
                         **(similarity_kw or {}))
        per_kind = {}
        for folds in fold_counts:
            if folds == 1:
                per_kind["all"] = recall_at_k(sim, c2i)
            elif n_images % folds == 0:
                per_kind[f"folds{folds}"] = recall_at_k_folds(sim, c2i, folds)
            else:
                log.warning("retrieval: %d images do not split into %d folds; skipped", n_images, folds)
        per_kind["score_seconds"] = time.perf_counter() - t0
        results[kind] = per_kind
        if return_scores:
            scores[kind] = sim
    if return_scores:
        results["scores"] = scores
    return results
