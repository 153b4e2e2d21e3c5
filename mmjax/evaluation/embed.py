"""Embed each modality once, then score every image set against every caption set in tiles.

Embedding (`mmjax.batching.batched_apply`): one jitted call per fixed-size batch; the last batch is padded with
copies of the last row (edge padding keeps masked towers finite) and the padding is sliced off again, so a data set
of any size compiles the embedding function exactly once.

Scoring (`score_sets`): S[i, n] = s(V_i, T_n) for a set similarity `kind` of `mmjax.similarity` (e.g. `'maxmatch'`
exact assignment S_H, `'maxmatch_topk'` inference, `'smooth_chamfer'`, `'mil'`), tiled on the host by
`mmjax.evaluation.tiled.tiled_scores` into blocks of `image_chunk` image sets × `caption_tile` caption sets, so peak
device memory is O(image_chunk · caption_tile · K_V · K_T) floats while the cosine matmul of each block is one
(image_chunk·K_V) × (caption_tile·K_T) GEMM. COCO 5K (5 000 × 25 000 sets, K = 4) therefore never holds more than
one block (defaults 256 × 32 768: all 25 000 captions in one tile, 256·25 000·16 floats ≈ 0.4 GB; prefer one
caption tile when it fits); the [n_images, n_captions] float32 score matrix (500 MB) lives on the host.

`evaluate_retrieval` turns the score matrix into R@1/5/10 both ways, RSUM and median/mean ranks
(`mmjax.evaluation.retrieval`), over the whole set ("all", e.g. COCO 5K) and as the mean of equal contiguous image
folds ("folds5", COCO 1K), for each requested similarity kind (MaxMatch: both `'maxmatch_topk'` and `'maxmatch'`).

Kinds covered by `mmjax.similarity.slab_supported` (`maxmatch_topk`; `maxmatch` with the enumerate solver, K ≤ 5)
run in the element-major slab form: one GEMM, then one fused elementwise pass over the K_V·K_T cell slabs
(docs/design.md#all-pairs-similarity).

Notebook use: kinds may be aliases (`'S_H'`, `mmjax.similarity.resolve_kind`); every helper here takes
`progress=False` to show no bar (`mmjax.batching.set_progress(False)` silences all of the library's bars);
`score_sets` / `evaluate_retrieval` take `normalize` (None, the default: the sets are used as given — model outputs
are unit rows, and the evaluation path adds no check; True: L2-normalised on the device, tile by tile; False:
checked on the host to be unit rows, ValueError naming the measured norm range otherwise).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.batching import batched_apply
from mmjax.evaluation.retrieval import recall_at_k, recall_at_k_folds
from mmjax.evaluation.tiled import tiled_scores
from mmjax.normalize import safe_normalize
from mmjax.similarity import (check_batch_of_sets, check_unit_norm, pairwise_set_similarity, resolve_kind,
                              slab_cosines, slab_similarity, slab_supported)

log = logging.getLogger(__name__)


def embed_retrieval_model(model, variables, images, image_mask, captions, caption_mask, *,
                          batch_size: int = 256, progress: bool = True) -> tuple[dict, dict]:
    """Image and caption set dicts ({"set", "mask", "global", ...} as numpy) of a `SetRetrievalModel` in eval mode.
    `progress=False`: no progress bars."""
    def embed_images(x, m):
        return model.apply(variables, x, m, method="embed_images")

    def embed_captions(ids, m):
        return model.apply(variables, ids, m, method="embed_captions")

    img = batched_apply(embed_images, (images, image_mask), batch_size=batch_size, name="[eval] embed images",
                        progress=progress)
    txt = batched_apply(embed_captions, (captions, caption_mask), batch_size=batch_size,
                        name="[eval] embed captions", progress=progress)
    return keep_set_arrays(img), keep_set_arrays(txt)


def keep_set_arrays(out: dict) -> dict:
    # Towers may return auxiliary entries (attention maps); evaluation needs only the arrays named below.
    return {k: v for k, v in out.items() if k in ("set", "mask", "global", "residual") and v is not None}


@functools.partial(jax.jit, static_argnames=("kind", "kw_items", "slabs", "normalize"))
def _score_block(img, txt, kind, kw_items, slabs, normalize=False):
    """Scores [image_block, text_block] of {"set", "mask"?} tiles; the caption tile is element-major [K_T, tile, D]
    when `slabs` (see `mmjax.similarity.slab_similarity`), else [tile, K_T, D]. A missing mask means all valid.
    `normalize`: L2-normalise the elements of both tiles first (either layout: along the last axis)."""
    kw = _thaw(kw_items)
    if normalize:
        img, txt = ({**t, "set": safe_normalize(t["set"].astype(jnp.promote_types(t["set"].dtype, jnp.float32)))}
                    for t in (img, txt))
    if slabs:
        return slab_similarity(slab_cosines(img["set"], txt["set"]), kind, img.get("mask"), txt.get("mask"), **kw)
    # Inside jit the sets are traced: pairwise_set_similarity checks nothing (the host checks in `score_sets`).
    return pairwise_set_similarity(img["set"], txt["set"], kind, img.get("mask"), txt.get("mask"), **kw)


@jax.jit
def _element_major(tile):  # {"set": [tile, K, D]} → [K, tile, D], once per caption tile, on device
    return {**tile, "set": jnp.swapaxes(tile["set"], 0, 1)}


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
               name: str | None = None, progress: bool = True, normalize: bool | None = None, **kw) -> np.ndarray:
    """Scores float32 [Ba, Bb] between sets a [Ba, K_V, D] and b [Bb, K_T, D] (see module docstring).

    Equals `pairwise_set_similarity(a, b, kind, a_mask, b_mask, **kw)`; `kw` are its options (`s_h`, `alpha`,
    `solver`, `topk_k`, ...). Tiled by `mmjax.evaluation.tiled.tiled_scores` (`image_chunk` × `caption_tile`
    blocks). Kinds and options that `mmjax.similarity.slab_supported` covers (MaxMatch top-k; exact S_H with the
    enumerate solver, K ≤ 5) run in the element-major slab form, whose set reduction is one fused pass after the
    GEMM; all-true masks are dropped. `kind` may be an alias (`'S_H'`); a single set [K, D] is refused with a hint.

    progress: False shows no bar (`name` labels it). normalize: None (default) uses the sets as given, True
    L2-normalises their elements (`safe_normalize`, on the device), False checks on the host that the valid
    elements are unit rows (`mmjax.similarity.check_unit_norm`; module docstring).
    """
    kind = resolve_kind(kind)
    check_batch_of_sets("a", np.shape(a), "[Ba, K_V, D]", "score_sets")
    check_batch_of_sets("b", np.shape(b), "[Bb, K_T, D]", "score_sets")
    a, b = np.asarray(a), np.asarray(b)
    for name_, mask, x in (("a_mask", a_mask, a), ("b_mask", b_mask, b)):
        if mask is not None and np.shape(mask) != x.shape[:2]:
            raise ValueError(f"{name_} must have shape {x.shape[:2]} to match its set, got {np.shape(mask)}")
    if normalize is False:
        check_unit_norm("a", a, a_mask, fn="score_sets")
        check_unit_norm("b", b, b_mask, fn="score_sets")
    elif normalize not in (None, True):
        raise ValueError(f"score_sets: normalize must be True, False or None, got {normalize!r}")
    # An all-valid mask is the same as no mask; dropping it lets the reduction skip the mask logic.
    images, texts = {"set": a}, {"set": b}
    if a_mask is not None and not np.all(a_mask):
        images["mask"] = np.asarray(a_mask, bool)
    if b_mask is not None and not np.all(b_mask):
        texts["mask"] = np.asarray(b_mask, bool)
    slabs = slab_supported(kind, a.shape[1], b.shape[1], **kw)
    score = functools.partial(_score_block, kind=kind, kw_items=_freeze(kw), slabs=slabs,
                              normalize=normalize is True)
    return tiled_scores(score, images, texts, image_block=image_chunk, text_block=caption_tile,
                        prepare_text_tile=_element_major if slabs else None,
                        name=(name or f"[eval] score {kind}") if progress else None)


def context_sets(context: dict, *, batch_size: int = 256, progress: bool = True) -> tuple[dict, dict]:
    """(image sets, caption sets) of an evaluation context: its precomputed "image_sets" / "caption_sets", or the
    outputs of its "embed_images" / "embed_captions" functions on its inputs (cached in the context, so several
    evaluators of one context embed once). `progress=False`: no progress bars."""
    if "image_sets" not in context:
        img = batched_apply(context["embed_images"], (context["images"], context.get("image_mask")),
                            batch_size=batch_size, name="[eval] embed images", progress=progress)
        txt = batched_apply(context["embed_captions"], (context["captions"], context.get("caption_mask")),
                            batch_size=batch_size, name="[eval] embed captions", progress=progress)
        context["image_sets"], context["caption_sets"] = keep_set_arrays(img), keep_set_arrays(txt)
    return context["image_sets"], context["caption_sets"]


def metrics_by_protocol(sim, caption_to_image, fold_counts: Sequence[int] = (1, 5), positives=None) -> dict:
    """{"all": R@K metrics of the whole matrix, "folds<n>": their mean over n contiguous image folds} for each count
    in `fold_counts` (1 → "all", e.g. COCO 5K; 5 → "folds5", COCO 1K), against the source ground truth; with
    `positives` (bool [n_images, n_captions], the semantic ground truth) also "semantic" and "semantic_folds<n>"
    (`mmjax.evaluation.retrieval`). Counts that do not divide the number of images are skipped with a warning."""
    c2i = np.asarray(caption_to_image, np.int64)
    out = {}
    for prefix, pos in (("", None), ("semantic", positives)):
        if prefix and pos is None:
            continue
        for folds in fold_counts:
            if folds == 1:
                out[prefix or "all"] = recall_at_k(sim, c2i, positives=pos)
            elif sim.shape[0] % folds == 0:
                out[f"{prefix}_folds{folds}" if prefix else f"folds{folds}"] = recall_at_k_folds(sim, c2i, folds,
                                                                                              positives=pos)
            elif not prefix:
                log.warning("retrieval: %d images do not split into %d folds; skipped", sim.shape[0], folds)
    return out


def evaluate_retrieval(image_sets: dict, caption_sets: dict, caption_to_image, *,
                       kinds: Sequence[str] = ("maxmatch_topk", "maxmatch"), fold_counts: Sequence[int] = (1, 5),
                       similarity_kw: dict | None = None, image_chunk: int = 256, caption_tile: int = 32768,
                       positives=None, return_scores: bool = False, progress: bool = True,
                       normalize: bool | None = None) -> dict:
    """R@K metrics per similarity kind and protocol.

    Args:
      image_sets / caption_sets: {"set": [N, K, D], "mask": [N, K] (optional)} (outputs of `embed_retrieval_model`).
      caption_to_image: int [n_captions].
      kinds: similarity kinds to report (MaxMatch: `'maxmatch_topk'` = paper inference, `'maxmatch'` = exact S_H);
        aliases such as `'S_H'` are scored as their kind and reported under the name given.
      fold_counts, positives: protocols (`metrics_by_protocol`; `positives` adds the semantic ground truth).
      progress: False shows no progress bar. normalize: see `score_sets` (None: the sets are used as given).
    Returns:
      {kind: {"all": metrics, "folds5": metrics, ...}}, plus {"scores": {kind: array}} when `return_scores`.
    """
    for kind in kinds:  # an unknown kind fails before any scoring
        resolve_kind(kind)
    if normalize is False:  # checked once here, not once per kind
        check_unit_norm("image_sets['set']", image_sets["set"], image_sets.get("mask"), fn="evaluate_retrieval")
        check_unit_norm("caption_sets['set']", caption_sets["set"], caption_sets.get("mask"), fn="evaluate_retrieval")
        normalize = None
    results, scores = {}, {}
    for kind in kinds:
        t0 = time.perf_counter()
        sim = score_sets(image_sets["set"], caption_sets["set"], kind, image_sets.get("mask"),
                         caption_sets.get("mask"), image_chunk=image_chunk, caption_tile=caption_tile,
                         progress=progress, normalize=normalize, **(similarity_kw or {}))
        results[kind] = {**metrics_by_protocol(sim, caption_to_image, fold_counts, positives),
                         "score_seconds": time.perf_counter() - t0}
        if return_scores:
            scores[kind] = sim
    if return_scores:
        results["scores"] = scores
    return results
