"""Flow-CLIP / Global-M heads trained on cached features of a frozen CLIP (docs/design.md#flowclip).

Features: `mmjax.models.feature_cache` directories (`data.cache_dir/{train,val}`). For ShapesWorld they are written
on first use from the exported run of `configs/clip_shapes.py` (`data.clip_workdir`,
`mmjax.models.frozen_clip`); for COCO they are built beforehand from a Hugging Face CLIP directory, Karpathy JSON and
NegCLIP TSV by `scripts/cache_clip_features.py`. Batches: `mmjax.data.cached_records.CachedRecordIterator`. Model:
`mmjax.models.flowclip_head.FlowCLIPHead` (parameters M, M_tok, W and the clipped logit scale), used through
`apply`. Loss: `mmjax.flowclip.flowclip_objective` (HNB + λ_CIMR·CIMR; `flowclip.use_local=False` is Global-M,
LABCLIP's head). Evaluation context: the head's score matrix over a split's cache, and on ShapesWorld the
compositional suites scored by the head over freshly encoded frozen-CLIP features.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np

from mmjax.data.cached_records import CachedRecordIterator
from mmjax.evaluation.scorers import pair_diagonal, shapesworld_suites_context
from mmjax.flowclip import flowclip_objective
from mmjax.models.feature_cache import FeatureCache
from mmjax.models.flowclip_head import FlowCLIPHead
from mmjax.models.frozen_clip import FrozenShapesWorldCLIP, write_shapesworld_cache


def _frozen_clip(clip_workdir: str, split: str, max_tokens: int) -> FrozenShapesWorldCLIP:
    from mmjax.train.export import load_exported
    params, info = load_exported(clip_workdir)
    return FrozenShapesWorldCLIP(params, info, clip_workdir, split, max_tokens)


class FlowCLIPHeadTask:
    device_keys = ("img_global", "img_patches", "pos_global", "pos_tokens", "pos_valid", "neg_global",
                   "neg_tokens", "neg_token_valid", "neg_valid", "image_ids", "example_valid")

    def __init__(self, config, workdir: str = "."):
        self.config = config
        self.workdir = workdir
        d = config.data
        self.caches = {split: self._cache(split, with_negatives=split == "train") for split in ("train", d.val_split)}
        self.dim = self.caches["train"].meta["arrays"]["img_global"]["shape"][-1]
        fc = config.flowclip
        self.head = FlowCLIPHead(self.dim, alpha=fc.alpha, tau_p=fc.tau_p, pool=fc.pool, method=fc.all_pairs,
                                 chunk_size=fc.score_chunk_images, chunk_budget_bytes=fc.score_chunk_bytes,
                                 use_local=fc.use_local,
                                 logit_scale_init=fc.logit_scale_init, logit_scale_max=fc.logit_scale_max)
        self.examples_per_step = d.batch_size

    def _cache(self, split: str, *, with_negatives: bool = False) -> FeatureCache:
        """The feature cache of `split`, written on first use for ShapesWorld with the frozen CLIP the head trains
        on (for evaluation splits: the CLIP recorded in the training cache, whatever the config says now)."""
        d = self.config.data
        directory = os.path.join(d.cache_dir or os.path.join(self.workdir, "feature_cache"), split)
        if not os.path.exists(os.path.join(directory, "meta.json")):
            if d.name != "shapesworld":
                raise FileNotFoundError(f"config.data.cache_dir: no feature cache for split {split!r} at "
                                        f"{directory}; build it with scripts/cache_clip_features.py")
            clip_workdir = self.caches["train"].meta["clip_workdir"] if split != "train" and hasattr(
                self, "caches") else d.clip_workdir
            if jax.process_index() == 0:
                print(f"[flowclip] encoding ShapesWorld {split} with the frozen CLIP -> {directory}", flush=True)
                clip = _frozen_clip(clip_workdir, split, self.config.flowclip.max_tokens)
                write_shapesworld_cache(clip, directory, split=split, with_negatives=with_negatives,
                                        max_tokens=self.config.flowclip.max_tokens)
        return FeatureCache(directory)

    def make_iterator(self, start=(0, 0)):
        return CachedRecordIterator(self.caches["train"], self.config.data.batch_size, self.config.seed, start)

    def export_info(self) -> dict:
        return {"task": "flowclip_head", "dim": self.dim, "flowclip": self.config.flowclip.to_dict()}

    @staticmethod
    def _texts(batch, prefix, valid_key):
        return {"global": batch[f"{prefix}_global"], "tokens": batch[f"{prefix}_tokens"], "valid": batch[valid_key]}

    def init_variables(self, rng, batch):
        image = {"global": batch["img_global"], "patches": batch["img_patches"]}
        return self.head.init(rng, image, self._texts(batch, "pos", "pos_valid"))

    def loss(self, params, extra, batch, rng, *, warmup: bool):
        scorer, scale = self.head.apply({"params": params}, method=lambda m: (m.scorer_params(), m.logit_scale()))
        objective_batch = {"image": {"global": batch["img_global"], "patches": batch["img_patches"]},
                           "pos_text": self._texts(batch, "pos", "pos_valid"),
                           "neg_text": self._texts(batch, "neg", "neg_token_valid"),
                           "image_ids": batch["image_ids"], "neg_valid": batch["neg_valid"]}
        loss, metrics = flowclip_objective(scorer, scale, objective_batch, rng, self.config.flowclip)
        metrics = {("loss/total" if k == "loss" else f"loss/{k}" if k in ("hnb", "cimr") else k): v
                   for k, v in metrics.items()}
        return loss, (metrics, extra)

    @functools.cached_property
    def _score(self):
        """(params, image features, text features) -> [Bi, Bt] head scores, jitted."""
        return jax.jit(lambda p, img, txt: self.head.apply({"params": p}, img, txt))

    @functools.cached_property
    def _score_diagonal(self):
        """(params, image features [n], text features [n]) -> [n]: pair p alone (the diagonal of `_score`), jitted."""
        return jax.jit(lambda p, img, txt: pair_diagonal(lambda i, t: self.head.apply({"params": p}, i, t), img, txt))

    def score_cache(self, params, cache: FeatureCache):
        """Head scores [n_images, n_records] of every cached image against every record's positive caption."""
        from mmjax.batching import pad_rows
        records = cache.records()
        images = cache.images(np.arange(cache.num_images))
        pos = np.array([r["pos"] for r in records])
        chunk = self.config.eval_caption_chunk
        cols = []
        for s in range(0, len(pos), chunk):
            idx = pos[s:s + chunk]
            cols.append(np.asarray(self._score(params, images, cache.texts(pad_rows(idx, chunk))))[:, :len(idx)])
        return np.concatenate(cols, axis=1), np.array([r["image"] for r in records])

    def eval_context(self, variables, split: str, *, suites: bool = True) -> dict:
        params = variables["params"]
        cache = self.caches.get(split) or self._cache(split)
        sim, caption_to_image = self.score_cache(params, cache)
        context = {"similarity": sim, "caption_to_image": caption_to_image,
                   "score_name": "flowclip" if self.config.flowclip.use_local else "global_m"}
        if suites and self.config.data.name == "shapesworld":
            clip = _frozen_clip(self.caches["train"].meta["clip_workdir"], split, self.config.flowclip.max_tokens)
            context.update(shapesworld_suites_context(
                clip.data, lambda idx: clip.encode_images(clip.data["images"][idx]), clip.encode_texts,
                lambda img, txt: self._score_diagonal(params, img, txt)))
        return context
