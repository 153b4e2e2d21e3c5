"""Flow-CLIP / Global-M heads trained on cached features of a frozen CLIP (docs/design.md#flowclip).

Features: `mmjax.models.feature_cache` directories (`data.cache_dir/{train,val}`). For ShapesWorld they are written
on first use from the exported run of `configs/clip_shapes.py` (`data.clip_workdir`,
`mmjax.models.frozen_clip`); for COCO they are built beforehand from a Hugging Face CLIP directory, Karpathy JSON and
NegCLIP TSV by `scripts/cache_clip_features.py`. Batches: `mmjax.data.cached_records.CachedRecordIterator`. Model:
`mmjax.models.flowclip_head.FlowCLIPHead` (parameters M, M_tok, W and the clipped logit scale; options
`mmjax.flowclip.FlowCLIPOptions` from `config.flowclip`), used through `apply` in training and evaluation alike.
Loss: `mmjax.models.flowclip_head.head_objective` (`mmjax.flowclip.flowclip_objective` on the head's scores: HNB +
λ_CIMR·CIMR; `flowclip.use_local=False` is Global-M, LABCLIP's head). Evaluation context: the head's score matrix
over a split's cache, and on ShapesWorld the compositional suites scored by the head over freshly encoded frozen-CLIP
features.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np

from mmjax.data.cached_records import CachedRecordIterator
from mmjax.data.shapesworld.suites import retrieval_positives
from mmjax.evaluation.blind import subsample
from mmjax.evaluation.scorers import pair_diagonal, shapesworld_suites_context
from mmjax.evaluation.tiled import tiled_scores
from mmjax.flowclip import FlowCLIPOptions
from mmjax.models.feature_cache import FeatureCache
from mmjax.models.flowclip_head import FlowCLIPHead, head_objective
from mmjax.models.frozen_clip import FrozenShapesWorldCLIP, write_shapesworld_cache
from mmjax.train.export import full_config
from mmjax.train.task import select_keys, single_phase


def _frozen_clip(clip_workdir: str, split: str, max_tokens: int) -> FrozenShapesWorldCLIP:
    from mmjax.train.export import load_exported
    params, info = load_exported(clip_workdir)
    return FrozenShapesWorldCLIP(params, info, clip_workdir, split, max_tokens)


# Evaluation splits: a validation on the suites reuses the split's generated data and frozen encoders.
_eval_clip = functools.lru_cache(maxsize=2)(_frozen_clip)


class FlowCLIPHeadTask:
    device_keys = ("img_global", "img_patches", "pos_global", "pos_tokens", "pos_valid", "neg_global",
                   "neg_tokens", "neg_token_valid", "neg_valid", "image_ids", "example_valid")
    float_inputs = ()  # features stay as cached; the scorer computes in float32

    def __init__(self, config, workdir: str = "."):
        self.config = config
        self.workdir = workdir
        self.options = FlowCLIPOptions.from_mapping(config.flowclip)
        d = config.data
        self.caches = {split: self._cache(split, with_negatives=split == "train") for split in ("train", d.val_split)}
        self.dim = self.caches["train"].meta["arrays"]["img_global"]["shape"][-1]
        self.head = FlowCLIPHead(self.dim, self.options)
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
                clip = _frozen_clip(clip_workdir, split, self.options.max_tokens)
                write_shapesworld_cache(clip, directory, split=split, with_negatives=with_negatives,
                                        max_tokens=self.options.max_tokens)
        return FeatureCache(directory)

    def make_iterator(self, start=(0, 0)):
        return CachedRecordIterator(self.caches["train"], self.config.data.batch_size, self.config.seed, start)

    def prepare_batch(self, host_batch: dict) -> dict:
        return select_keys(host_batch, self.device_keys)

    def phases(self, steps_per_epoch: int):
        return single_phase()

    def export_info(self) -> dict:
        """The head's options and, so the export loads on its own (`mmjax.load`), the complete config and the
        frozen CLIP it scores the features of ("base": its export, copied into the head's export)."""
        info = {"task": "flowclip_head", "dim": self.dim, "flowclip": self.options.to_dict(),
                "full_config": full_config(self.config)}
        meta = self.caches["train"].meta
        if meta.get("clip_workdir"):  # ShapesWorld: the exported CLIP; COCO caches name an HF CLIP directory
            info["base"] = {"export": os.path.join(os.path.abspath(meta["clip_workdir"]), "export")}
        elif meta.get("clip_dir"):
            info["base"] = {"hf_clip_dir": meta["clip_dir"]}
        return info

    @staticmethod
    def _texts(batch, prefix, valid_key):
        return {"global": batch[f"{prefix}_global"], "tokens": batch[f"{prefix}_tokens"], "valid": batch[valid_key]}

    def init_variables(self, rng, batch):
        image = {"global": batch["img_global"], "patches": batch["img_patches"]}
        return self.head.init(rng, image, self._texts(batch, "pos", "pos_valid"))

    def loss(self, params, extra, batch, rng, phase):
        del phase  # one phase: the heads have no warm-up
        objective_batch = {"image": {"global": batch["img_global"], "patches": batch["img_patches"]},
                           "pos_text": self._texts(batch, "pos", "pos_valid"),
                           "neg_text": self._texts(batch, "neg", "neg_token_valid"),
                           "image_ids": batch["image_ids"], "neg_valid": batch["neg_valid"]}
        loss, metrics = head_objective(self.head, params, objective_batch, rng)
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
        """Head scores [n_images, n_records] of every cached image against every record's positive caption
        (`mmjax.evaluation.tiled.tiled_scores`: all images × `eval_caption_chunk` captions per call)."""
        records = cache.records()
        pos = np.array([r["pos"] for r in records])
        # Storage dtype (float16) on the host; the scorer casts each tile to float32.
        images = cache.images(np.arange(cache.num_images), dtype=None)
        sim = tiled_scores(functools.partial(self._score, params), images, cache.texts(pos, dtype=None),
                           image_block=cache.num_images, text_block=self.config.eval_caption_chunk)
        return sim, np.array([r["image"] for r in records])

    def _blind_inputs(self, clip: FrozenShapesWorldCLIP) -> dict:
        """The blind baseline's inputs (`mmjax.evaluation.blind`): the frozen text globals of the training pairs the
        heads see (read from the training cache) and of any caption (encoded by the frozen CLIP)."""
        cache = self.caches["train"]
        pairs = [(r["pos"], r["neg"]) for r in cache.records() if "neg" in r]

        def blind_pairs(max_pairs):
            idx = np.asarray(pairs, np.int64)[subsample(len(pairs), max_pairs, self.config.seed)]
            return (cache.texts_global(idx[:, 0]), cache.texts_global(idx[:, 1]))
        return {"blind_pairs": blind_pairs, "blind_encode_texts": lambda captions: clip.encode_texts(captions)["global"]}

    def eval_context(self, variables, split: str, *, suites: bool = True) -> dict:
        params = variables["params"]
        cache = self.caches.get(split) or self._cache(split)
        sim, caption_to_image = self.score_cache(params, cache)
        context = {"similarity": sim, "caption_to_image": caption_to_image,
                   "score_name": "flowclip" if self.config.flowclip.use_local else "global_m"}
        if suites and self.config.data.name == "shapesworld":
            clip = _eval_clip(self.caches["train"].meta["clip_workdir"], split, self.options.max_tokens)
            context.update(shapesworld_suites_context(
                clip.data, lambda idx: clip.encode_images(clip.images[idx]), clip.encode_texts,
                lambda img, txt: self._score_diagonal(params, img, txt)))
            context.update(self._blind_inputs(clip))
            n_caps = len(clip.data["captions"][0])
            if np.array_equal(caption_to_image, np.arange(sim.shape[1]) // n_caps):  # records in caption order
                context["semantic_positives"] = retrieval_positives(clip.data)
        return context
