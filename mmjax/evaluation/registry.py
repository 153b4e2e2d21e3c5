"""Evaluator registry: `run_evaluator(name, cfg, context) -> dict` (JSON-serialisable; plots written as PNG).

`cfg` is a plain dict of options (missing keys take the defaults below); `context` carries what the caller owns
(model apply functions, data, scorers). What each evaluator needs in `context`:

retrieval     either "similarity" (an [n_images, n_captions] array or a callable returning it; models scored as a
              whole matrix, e.g. Flow-CLIP heads; results keyed by "score_name"), or precomputed sets —
              "image_sets" {"set" [N,K,D], "mask"?}, "caption_sets" — or embedding
              functions "embed_images"(x, mask) -> dict, "embed_captions"(ids, mask) -> dict with inputs "images",
              "image_mask" (may be None), "captions", "caption_mask"; always "caption_to_image" int [n_captions].
              cfg: kinds ("maxmatch_topk", "maxmatch"), fold_counts (1, 5), similarity_kw {}, batch_size 256,
              image_chunk 256, caption_tile 32768.
compositional "records": list of `CompositionalRecord` (or {suite name: list}) and "score_fn" (pair scorer,
              `mmjax.evaluation.scorers`). cfg: conditions ("real", "shuffle", "fixed"), seed 0, tie_policy {task:
              policy}, batch_size 512, vga_min_count 25, keep_scores False.
zeroshot      "score_matrix_fn"(images_batch, prompts) -> [B, P] and either "images", "labels", "class_names" or
              cfg "folder" (class sub-folders; images are passed as paths) or cfg "tfds" {name, split, data_dir}.
              cfg: templates (DEFAULT_TEMPLATES), batch_size 256.
set_analysis  sets as for retrieval (precomputed or embedding functions). cfg: kind "maxmatch", similarity_kw {},
              out_dir (PNG figures; None = no figures), embedding_plot "pca" | "tsne", metrics_jsonl (training
              curves), single_element True.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from mmjax.batching import batched_apply
from mmjax.evaluation import controls, embed, set_analysis, zeroshot


def _sets(cfg: dict, context: dict) -> tuple[dict, dict]:
    if "image_sets" in context:
        return context["image_sets"], context["caption_sets"]
    bs = cfg.get("batch_size", 256)
    img = batched_apply(context["embed_images"], (context["images"], context.get("image_mask")),
                              batch_size=bs, name="[eval] embed images")
    txt = batched_apply(context["embed_captions"], (context["captions"], context.get("caption_mask")),
                              batch_size=bs, name="[eval] embed captions")
    # Cache so set_analysis after retrieval on the same context does not embed twice.
    context["image_sets"], context["caption_sets"] = embed.keep_set_arrays(img), embed.keep_set_arrays(txt)
    return context["image_sets"], context["caption_sets"]


def run_retrieval(cfg: dict, context: dict) -> dict:
    if "similarity" in context:  # models scored as a whole matrix (Flow-CLIP heads, CLIP cosine)
        from mmjax.evaluation.retrieval import recall_at_k, recall_at_k_folds
        sim = context["similarity"]() if callable(context["similarity"]) else context["similarity"]
        c2i = np.asarray(context["caption_to_image"])
        out = {"all": recall_at_k(sim, c2i)}
        for folds in cfg.get("fold_counts", (1, 5)):
            if folds > 1 and sim.shape[0] % folds == 0:
                out[f"folds{folds}"] = recall_at_k_folds(sim, c2i, folds)
        return {context.get("score_name", "score"): out}
    img, txt = _sets(cfg, context)
    return embed.evaluate_retrieval(img, txt, context["caption_to_image"],
                                    kinds=tuple(cfg.get("kinds", ("maxmatch_topk", "maxmatch"))),
                                    fold_counts=tuple(cfg.get("fold_counts", (1, 5))),
                                    similarity_kw=cfg.get("similarity_kw"), image_chunk=cfg.get("image_chunk", 256),
                                    caption_tile=cfg.get("caption_tile", 32768))


def run_compositional(cfg: dict, context: dict) -> dict:
    suites = context["records"]
    if not isinstance(suites, dict):
        suites = {"records": suites}
    opts = {k: cfg[k] for k in ("vga_min_count", "train_identities") if k in cfg}
    out = {}
    for name, records in suites.items():
        result = controls.evaluate_with_controls(
            list(records), context["score_fn"], conditions=tuple(cfg.get("conditions", controls.CONDITIONS)),
            seed=cfg.get("seed", 0), tie_policy=cfg.get("tie_policy"), batch_size=cfg.get("batch_size", 512),
            keep_scores=cfg.get("keep_scores", False), **opts)
        print(f"== {name}: accuracy (%) under image-replacement controls ==\n{result['table']}")
        out[name] = result
    return out


def run_zeroshot(cfg: dict, context: dict) -> dict:
    if "folder" in cfg:
        images, labels, names = zeroshot.load_image_folder(cfg["folder"])
    elif "tfds" in cfg:
        t = cfg["tfds"]
        images, labels, names = zeroshot.load_tfds(t["name"], t.get("split", "test"), data_dir=t.get("data_dir"))
    else:
        images, labels, names = context["images"], context["labels"], context["class_names"]
    return zeroshot.zeroshot_classify(context["score_matrix_fn"], images, labels, names,
                                      templates=tuple(cfg.get("templates", zeroshot.DEFAULT_TEMPLATES)),
                                      batch_size=cfg.get("batch_size", 256))


def run_set_analysis(cfg: dict, context: dict) -> dict:
    from mmjax.evaluation import plots  # matplotlib only when figures are asked for

    img, txt = _sets(cfg, context)
    c2i = context["caption_to_image"]
    matrix = set_analysis.element_similarity_matrix(img, txt, c2i)
    out = {"circular_variance": set_analysis.circular_variance_summary(img, txt),
           "element_similarity": matrix.tolist()}
    if cfg.get("single_element", True):
        out["single_element"] = set_analysis.single_element_retrieval(
            img, txt, c2i, kind=cfg.get("kind", "maxmatch"), similarity_kw=cfg.get("similarity_kw"))
    out_dir = cfg.get("out_dir")
    if out_dir:
        # Fig. 3 shows a few matched pairs: the first caption of each of the first `plot_sets` images.
        c2i_np = np.asarray(c2i)
        n_plot = min(cfg.get("plot_sets", 100), img["set"].shape[0])
        first_caption = np.asarray([np.flatnonzero(c2i_np == i)[0] for i in range(n_plot)])
        figures = {"element_similarity": plots.plot_similarity_heatmap(
                       matrix, os.path.join(out_dir, "element_similarity.png")),
                   "element_embeddings": plots.plot_element_embeddings(
                       img["set"][:n_plot], txt["set"][first_caption[:n_plot]],
                       os.path.join(out_dir, "element_embeddings.png"), method=cfg.get("embedding_plot", "pca"))}
        if cfg.get("metrics_jsonl"):
            figures["training_curves"] = plots.plot_training_curves(
                cfg["metrics_jsonl"], os.path.join(out_dir, "training_curves.png"))
        out["figures"] = figures
    return out


EVALUATORS: dict[str, Callable[[dict, dict], dict]] = {
    "retrieval": run_retrieval,
    "compositional": run_compositional,
    "zeroshot": run_zeroshot,
    "set_analysis": run_set_analysis,
}


def run_evaluator(name: str, cfg: dict | None, context: dict) -> dict:
    """Runs `EVALUATORS[name]` (see module docstring for `cfg` and `context`)."""
    if name not in EVALUATORS:
        raise ValueError(f"unknown evaluator {name!r}; choose one of {sorted(EVALUATORS)}")
    return EVALUATORS[name](dict(cfg or {}), context)
