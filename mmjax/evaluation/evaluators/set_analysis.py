"""`type: set_analysis` — what a set model's elements do (docs/design.md#set-analysis): circular variance of the
elements, retrieval by each single image element beside the full set, the K × K element-similarity matrix of matched
pairs, and (with a plot directory) its heat map and a 2-D projection of the elements.

Context: set embeddings as for `retrieval` (precomputed or embedding functions) and "caption_to_image".

Options: kind (the similarity of the single-element retrieval; default: the inference score of the run's training
similarity, `mmjax.similarity.inference_kind`, else 'maxmatch'), similarity_kw (over the run's own), batch_size (embedding; None: `embed.context_sets`'s),
single_element (True), embedding_plot ('pca' | 'tsne'), plot_sets (100: matched pairs drawn, Fig. 3).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from mmjax.evaluation import embed, set_analysis
from mmjax.evaluation.evaluators.base import (Evaluator, InvalidOption, RunScoring, check_choices, check_int,
                                              check_type, markdown_table)
from mmjax.evaluation.retrieval import RECALL_KEYS
from mmjax.similarity import KINDS, inference_kind


@dataclasses.dataclass(frozen=True)
class Options:
    kind: str | None = None
    similarity_kw: Mapping[str, Any] | None = None
    batch_size: int | None = None
    single_element: bool = True
    embedding_plot: str = "pca"
    plot_sets: int = 100

    def __post_init__(self):
        if self.kind is not None:
            check_choices("kind", (self.kind,), KINDS)
        check_type("similarity_kw", self.similarity_kw, Mapping, "a mapping of similarity options")
        check_int("batch_size", self.batch_size)
        check_type("single_element", self.single_element, bool, "True or False")
        if self.embedding_plot not in ("pca", "tsne"):
            raise InvalidOption("embedding_plot", f"must be 'pca' or 'tsne', got {self.embedding_plot!r}")
        check_int("plot_sets", self.plot_sets)

    def with_scoring(self, scoring: RunScoring) -> "Options":
        kw = {**scoring.similarity_kw, **dict(self.similarity_kw or {})}
        default = inference_kind(scoring.similarity) if scoring.similarity else "maxmatch"
        return dataclasses.replace(self, kind=self.kind or default, similarity_kw=kw)


def run(options: Options, context: dict, env) -> dict:
    from mmjax.evaluation import plots  # matplotlib only when figures are drawn

    batch = {"batch_size": options.batch_size} if options.batch_size else {}
    img, txt = embed.context_sets(context, **batch)
    c2i = context["caption_to_image"]
    matrix = set_analysis.element_similarity_matrix(img, txt, c2i)
    out = {"circular_variance": set_analysis.circular_variance_summary(img, txt),
           "element_similarity": matrix.tolist()}
    kind = options.kind or "maxmatch"
    if options.single_element:
        out["single_element"] = set_analysis.single_element_retrieval(
            img, txt, c2i, kind=kind, similarity_kw=dict(options.similarity_kw or {}),
            positives=context.get("semantic_positives"))
    if env.plot_dir:
        # Fig. 3 shows a few matched pairs: the first caption of each of the first `plot_sets` images.
        c2i_np = np.asarray(c2i)
        n_plot = min(options.plot_sets, img["set"].shape[0])
        first_caption = np.asarray([np.flatnonzero(c2i_np == i)[0] for i in range(n_plot)])
        out["figures"] = {
            "element_similarity": plots.plot_similarity_heatmap(
                matrix, os.path.join(env.plot_dir, "element_similarity.png")),
            "element_embeddings": plots.plot_element_embeddings(
                img["set"][:n_plot], txt["set"][first_caption], os.path.join(env.plot_dir, "element_embeddings.png"),
                method=options.embedding_plot)}
    return out


def tables(name: str, result: dict) -> list[str]:
    lines = []
    rows = [[side, key, f"{v['mean_cv']:.4f}", f"{v['mean_log_cv']:.3f}"]
            for side, by_key in (result.get("circular_variance") or {}).items() for key, v in by_key.items()]
    if rows:
        lines += [f"### {name}: circular variance", "",
                  *markdown_table(["modality", "vectors", "mean CV", "mean log CV"], rows), ""]
    single = result.get("single_element")
    if isinstance(single, dict) and "full" in single:
        rows = [["full set"] + [f"{single['full'][k]:.2f}" for k in RECALL_KEYS]]
        rows += [[f"element {i}"] + [f"{m[k]:.2f}" for k in RECALL_KEYS] for i, m in enumerate(single["elements"])]
        lines += [f"### {name}: single-element retrieval ({single.get('kind', '')})", "",
                  *markdown_table(["image sets", *RECALL_KEYS], rows), ""]
        sem = single.get("semantic")
        if sem:
            rows = [["full set"] + [f"{sem['full'][k]:.2f}" for k in RECALL_KEYS]]
            rows += [[f"element {i}"] + [f"{m[k]:.2f}" for k in RECALL_KEYS] for i, m in enumerate(sem["elements"])]
            lines += [f"### {name}: single-element retrieval ({single.get('kind', '')}, semantic ground truth)", "",
                      *markdown_table(["image sets", *RECALL_KEYS], rows), ""]
    return lines


EVALUATOR = Evaluator(Options, run, tables=tables)
