"""Set diagnostics for MaxMatch and the set baselines (docs/design.md#set-analysis).

- **Circular variance** of one set of unit elements u_1..u_K (valid ones only): CV = 1 − ‖(1/K) Σ_k u_k‖₂
  (0 = all elements identical, 1 = zero mean direction). The paper's negative "higher is better" values are most
  plausibly mean ln CV, so both mean CV and mean ln(max(CV, 1e-12)) are reported, per modality, on the final
  elements ("set") and on the residuals when the model returns them.
- **Single-element retrieval**: for each k, every image set is replaced by {v_k} (caption sets complete) and
  retrieval is recomputed with the same similarity (m = 1, so S = f(max_j C_kj) for `maxmatch` and `maxmatch_topk`
  alike). Reports RSUM (and all R@K) per k next to the full set.
- **Element-similarity matrix** (paper Fig. 4): the K_V × K_T matrix of C_ij = v_i · t_j averaged over all matching
  (image, caption) pairs of the test set, index-aligned (no reordering); masked cells are averaged over the pairs
  where both elements are valid.
"""

from __future__ import annotations

import numpy as np

from mmjax.evaluation.embed import score_sets
from mmjax.evaluation.retrieval import recall_at_k
from mmjax.normalize import unit_normalize


def _unit(x) -> np.ndarray:
    return unit_normalize(np.asarray(x, np.float32))


def circular_variance(sets, mask=None) -> np.ndarray:
    """CV per set, float [N], of sets [N, K, D] (elements normalised here; masked elements ignored)."""
    u = _unit(sets)
    m = np.ones(u.shape[:2], bool) if mask is None else np.asarray(mask, bool)
    mean = np.sum(u * m[..., None], axis=1) / np.maximum(m.sum(axis=1, keepdims=True), 1)
    return 1.0 - np.linalg.norm(mean, axis=-1)


def circular_variance_summary(image_sets: dict, caption_sets: dict) -> dict:
    """{"image"|"text": {"set"|"residual": {"mean_cv", "mean_log_cv"}}} for the arrays present."""
    out = {}
    for name, sets in (("image", image_sets), ("text", caption_sets)):
        out[name] = {}
        for key in ("set", "residual"):
            if sets.get(key) is None:
                continue
            cv = circular_variance(sets[key], sets.get("mask"))
            out[name][key] = {"mean_cv": float(np.mean(cv)),
                              "mean_log_cv": float(np.mean(np.log(np.maximum(cv, 1e-12))))}
    return out


def single_element_retrieval(image_sets: dict, caption_sets: dict, caption_to_image, *, kind: str = "maxmatch",
                             similarity_kw: dict | None = None, image_chunk: int = 128,
                             caption_tile: int = 4096, positives=None) -> dict:
    """{"kind", "full": metrics, "elements": [metrics for k in range(K_V)], "rsum_per_element": [...]} against the
    source ground truth (module docstring); with `positives` (the semantic ground truth, bool [n_images,
    n_captions]) also "semantic": {"full", "elements"} from the same score matrices."""
    kw = dict(similarity_kw or {})
    img, img_mask = np.asarray(image_sets["set"]), image_sets.get("mask")
    txt, txt_mask = np.asarray(caption_sets["set"]), caption_sets.get("mask")

    def metrics(a, am):
        sim = score_sets(a, txt, kind, am, txt_mask, image_chunk=image_chunk, caption_tile=caption_tile, **kw)
        return (recall_at_k(sim, caption_to_image),
                None if positives is None else recall_at_k(sim, caption_to_image, positives=positives))

    full, full_sem = metrics(img, img_mask)
    # Element k of an image whose element k is padded has no valid element: it is kept as is (documented gap).
    per_element = [metrics(img[:, k:k + 1], None) for k in range(img.shape[1])]
    out = {"kind": kind, "full": full, "elements": [m for m, _ in per_element], "rsum_full": full["rsum"],
           "rsum_per_element": [m["rsum"] for m, _ in per_element]}
    if positives is not None:
        out["semantic"] = {"full": full_sem, "elements": [m for _, m in per_element]}
    return out


def element_similarity_matrix(image_sets: dict, caption_sets: dict, caption_to_image) -> np.ndarray:
    """[K_V, K_T] mean cosine between image element i and caption element j over matching pairs."""
    c2i = np.asarray(caption_to_image, np.int64)
    v = _unit(image_sets["set"])[c2i]  # [N_t, K_V, D], the image of each caption
    t = _unit(caption_sets["set"])
    c = np.einsum("nkd,njd->nkj", v, t)
    vm = np.ones(v.shape[:2], bool) if image_sets.get("mask") is None else np.asarray(image_sets["mask"], bool)[c2i]
    tm = np.ones(t.shape[:2], bool) if caption_sets.get("mask") is None else np.asarray(caption_sets["mask"], bool)
    cell = vm[:, :, None] & tm[:, None, :]
    return np.sum(np.where(cell, c, 0.0), axis=0) / np.maximum(cell.sum(axis=0), 1)
