"""`type: retrieval` — R@1/5/10 both ways and RSUM, per score and protocol (docs/design.md#retrieval-metrics).

Context: either "similarity" (an [n_images, n_captions] array, or a callable returning it: models scored as a
whole, e.g. Flow-CLIP heads or CLIP cosine; results keyed by the context's "score_name"), or set embeddings —
precomputed "image_sets" / "caption_sets" ({"set" [N, K, D], "mask"?}) or "embed_images"(x, mask) /
"embed_captions"(ids, mask) with inputs "images", "image_mask", "captions", "caption_mask" — and always
"caption_to_image" int [n_captions]. A context with "semantic_positives" (bool [n_images, n_captions]: every pair on
which the caption is true, ShapesWorld) is also scored against that ground truth ("semantic" protocols).

Options (None: the default of `mmjax.evaluation.embed.evaluate_retrieval` / `metrics_by_protocol`):
    kinds          similarity kinds to score sets with; default: the run's (`mmjax.similarity.reported_kinds` of
                   its training similarity: MaxMatch reports top-k inference and exact S_H)
    fold_counts    protocols: 1 → "all" (COCO 5K), 5 → "folds5" (COCO 1K)
    similarity_kw  options of the similarity (s_h, solver, alpha, …) over the run's own (`config.loss`)
    batch_size     rows per embedding call; image_chunk, caption_tile: the scoring tiles (`score_sets`)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from mmjax.evaluation import embed
from mmjax.evaluation.evaluators.base import (Evaluator, InvalidOption, RunScoring, as_tuple, check_choices,
                                              check_int, check_type, given, markdown_table)
from mmjax.evaluation.retrieval import RECALL_KEYS
from mmjax.similarity import KINDS, reported_kinds


@dataclasses.dataclass(frozen=True)
class Options:
    kinds: tuple[str, ...] | None = None
    fold_counts: tuple[int, ...] | None = None
    similarity_kw: Mapping[str, Any] | None = None
    batch_size: int | None = None
    image_chunk: int | None = None
    caption_tile: int | None = None

    def __post_init__(self):
        as_tuple(self, "kinds", "fold_counts")
        check_choices("kinds", self.kinds, KINDS)
        if self.fold_counts is not None:
            if not isinstance(self.fold_counts, tuple) or not self.fold_counts:
                raise InvalidOption("fold_counts", f"must be a non-empty list of ints >= 1, got {self.fold_counts!r}")
            for n in self.fold_counts:
                check_int("fold_counts", n)
        check_type("similarity_kw", self.similarity_kw, Mapping, "a mapping of similarity options")
        for name in ("batch_size", "image_chunk", "caption_tile"):
            check_int(name, getattr(self, name))

    def with_scoring(self, scoring: RunScoring) -> "Options":
        kinds = self.kinds or (reported_kinds(scoring.similarity) if scoring.similarity else None)
        kw = {**scoring.similarity_kw, **dict(self.similarity_kw or {})}
        return dataclasses.replace(self, kinds=kinds, similarity_kw=kw or None)


def run(options: Options, context: dict, env) -> dict:
    if "similarity" in context:  # models scored as a whole matrix (Flow-CLIP heads, CLIP cosine)
        sim = context["similarity"]() if callable(context["similarity"]) else context["similarity"]
        protocols = {"fold_counts": options.fold_counts} if options.fold_counts else {}
        return {context.get("score_name", "score"): embed.metrics_by_protocol(
            sim, context["caption_to_image"], positives=context.get("semantic_positives"), **protocols)}
    opts = given(options)
    img, txt = embed.context_sets(context, **{k: opts.pop(k) for k in ("batch_size",) if k in opts})
    return embed.evaluate_retrieval(img, txt, context["caption_to_image"],
                                    positives=context.get("semantic_positives"), **opts)


def tables(name: str, result: dict) -> list[str]:
    rows = [[score, protocol] + [f"{m[k]:.2f}" for k in RECALL_KEYS]
            for score, by_protocol in result.items() if isinstance(by_protocol, dict)
            for protocol, m in by_protocol.items() if isinstance(m, dict) and "rsum" in m]
    return [f"### {name}", "", *markdown_table(["score", "protocol", *RECALL_KEYS], rows), ""] if rows else []


def flat_metrics(result: dict, primary: str | None = None) -> dict:
    """One retrieval result as flat scalars: the `primary` score's metrics of protocol 'all' unprefixed (the
    trainer's best-checkpoint selection reads `train.select_metric`, by default its "rsum"), its other protocols as
    "<protocol>/metric" (e.g. "semantic/rsum"), and every other score's as "<kind>/metric" and
    "<kind>/<protocol>/metric"."""
    scores = [k for k, v in result.items() if isinstance(v, dict) and "all" in v]
    if not scores:
        raise ValueError(f"retrieval result has no 'all' protocol: keys {sorted(result)}")
    primary = primary if primary in scores else scores[0]
    out = {}
    for kind in [primary] + [k for k in scores if k != primary]:
        for protocol, metrics in result[kind].items():
            if not isinstance(metrics, dict):
                continue
            prefix = "/".join(p for p in ("" if kind == primary else kind, "" if protocol == "all" else protocol)
                              if p)
            out.update({(f"{prefix}/" if prefix else "") + k: float(v) for k, v in metrics.items()})
    return out


EVALUATOR = Evaluator(Options, run, tables=tables)
