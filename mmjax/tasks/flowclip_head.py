"""Flow-CLIP / Global-M heads trained on cached features of a frozen CLIP (`flowclip.md` §5–§7).

Features: `mmjax.models.feature_cache` directories (`data.cache_dir/{train,val}`). For ShapesWorld they are written
on first use from the exported run of `configs/clip_shapes.py` (`data.clip_workdir`); for COCO they are built
beforehand from a Hugging Face CLIP directory, Karpathy JSON and NegCLIP TSV by `scripts/cache_clip_features.py`. Each training
record is (image, positive caption, hard negative or none, image identity); batches are a pure function of
(seed, epoch, step). Loss: `mmjax.flowclip.flowclip_objective` (HNB + λ_CIMR·CIMR; `flowclip.use_local=False` is
Global-M, LABCLIP's head). Validation: retrieval R@K/RSUM over the val cache with the head's scores.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.evaluation.retrieval import recall_at_k
from mmjax.flowclip import flowclip_objective, score_pairs
from mmjax.models.feature_cache import FeatureCache, write_feature_cache
from mmjax.models.flowclip_head import FlowCLIPHead


class CachedRecordIterator:
    """Resumable record batches from a feature cache (same protocol as `mmjax.data.pipeline.BatchIterator`)."""

    def __init__(self, cache: FeatureCache, batch_size: int, seed: int, start=(0, 0)):
        records = cache.records()
        self.cache = cache
        self.image = np.array([r["image"] for r in records], np.int64)
        self.pos = np.array([r["pos"] for r in records], np.int64)
        self.neg = np.array([r.get("neg", -1) for r in records], np.int64)
        self.image_id = np.array([int(r.get("image_id", r["image"])) for r in records], np.int64)
        self.batch_size, self.seed = batch_size, seed
        self.steps_per_epoch = len(records) // batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(f"{len(records)} cached records are fewer than one batch of {batch_size}")
        pc, pi = jax.process_count(), jax.process_index()
        if batch_size % pc:
            raise ValueError(f"batch_size {batch_size} is not divisible by {pc} processes")
        self._slice = slice(pi * batch_size // pc, (pi + 1) * batch_size // pc)
        self.position = tuple(start)

    def batch_at(self, epoch: int, step: int) -> dict:
        order = np.random.default_rng(np.random.SeedSequence([self.seed, 0, epoch])).permutation(len(self.image))
        b = order[step * self.batch_size:(step + 1) * self.batch_size][self._slice]
        img, pos, neg = (self.cache.images(self.image[b]), self.cache.texts(self.pos[b]),
                         self.cache.texts(np.maximum(self.neg[b], 0)))
        return {"img_global": img["global"], "img_patches": img["patches"], "pos_global": pos["global"],
                "pos_tokens": pos["tokens"], "pos_valid": pos["valid"], "neg_global": neg["global"],
                "neg_tokens": neg["tokens"], "neg_token_valid": neg["valid"] & (self.neg[b] >= 0)[:, None],
                "neg_valid": self.neg[b] >= 0, "image_ids": self.image_id[b],
                "example_valid": np.ones(len(b), bool)}

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        batch = self.batch_at(*self.position)
        epoch, step = self.position
        self.position = (epoch + 1, 0) if step + 1 == self.steps_per_epoch else (epoch, step + 1)
        return batch

    def close(self):
        pass


class FrozenShapesWorldCLIP:
    """The exported ShapesWorld CLIP of `clip_workdir` (frozen) with the split it was trained on, encoding images
    and caption strings in fixed-size batches (one compilation each). Outputs are the raw Flow-CLIP inputs:
    images {"global", "patches"}, texts {"global", "tokens", "valid"} (truncated to `max_tokens`)."""

    batch_size = 64

    def __init__(self, clip_workdir: str, split: str, max_tokens: int):
        from mmjax.data import shapesworld
        from mmjax.models.clip import CLIPConfig, CLIPModel
        from mmjax.train.export import load_exported
        from mmjax.tasks.clip_pretrain import normalise_pixels

        params, info = load_exported(clip_workdir)
        if info.get("task") != "clip_pretrain":
            raise ValueError(f"{clip_workdir}: exported task is {info.get('task')!r}, not 'clip_pretrain'")
        self.clip_workdir = os.path.abspath(clip_workdir)
        model = CLIPModel(CLIPConfig.from_dict(info["clip_config"]))
        self.data = shapesworld.generate(split, preset=info["preset"], seed=info["seed"], mode="pixels")
        self.tokenizer = shapesworld.ShapesWorld(self.data["config"]).tokenizer()
        self.max_tokens = max_tokens
        self._variables = {"params": params["params"]}
        self._img_fn = jax.jit(lambda v, x: model.apply(v, normalise_pixels(x), method="encode_image"))
        self._txt_fn = jax.jit(lambda v, i, m: model.apply(v, i, m, method="encode_text"))

    def _padded(self, fn, *arrays):
        n = len(arrays[0])
        arrays = [np.concatenate([a, np.repeat(a[-1:], self.batch_size - n, 0)]) for a in arrays]
        return {k: np.asarray(v)[:n] for k, v in fn(self._variables, *arrays).items()}

    def encode_images(self, pixels):
        """uint8 [n ≤ batch_size, H, W, 3] -> {"global", "patches"}."""
        return self._padded(self._img_fn, np.asarray(pixels))

    def encode_texts(self, strings):
        """n ≤ batch_size strings -> {"global", "tokens", "valid"}."""
        enc = self.tokenizer.encode(list(strings))
        out = self._padded(self._txt_fn, enc.ids, enc.attention_mask.astype(np.int32))
        out["tokens"], out["valid"] = out["tokens"][:, :self.max_tokens], out["valid"][:, :self.max_tokens]
        return out


def _shapesworld_cache(config, split: str, directory: str, with_negatives: bool, clip_workdir: str | None = None):
    """Encodes a ShapesWorld split with the exported frozen CLIP of `clip_workdir` (default `data.clip_workdir`)."""
    clip = FrozenShapesWorldCLIP(clip_workdir or config.data.clip_workdir, split, config.flowclip.max_tokens)
    data = clip.data
    n, c = len(data["captions"]), len(data["captions"][0])
    texts = [t for caps in data["captions"] for t in caps]
    records = []
    neg_text_index = {}
    for i in range(n):
        for j in range(c):
            rec = {"image": i, "pos": i * c + j, "image_id": int(data["image_ids"][i])}
            k = int(data["train_neg_index"][i, j]) if with_negatives else -1
            if k >= 0:
                if k not in neg_text_index:
                    neg_text_index[k] = len(texts)
                    texts.append(data["neg_text"][k])
                rec["neg"] = neg_text_index[k]
            records.append(rec)
    write_feature_cache(directory, data["images"], texts, encode_image=clip.encode_images,
                        encode_text=clip.encode_texts, records=records, batch_size=clip.batch_size,
                        max_tokens=config.flowclip.max_tokens, overwrite=True,
                        extra_meta={"source": "shapesworld", "split": split, "clip_workdir": clip.clip_workdir})


class FlowCLIPHeadTask:
    device_keys = ("img_global", "img_patches", "pos_global", "pos_tokens", "pos_valid", "neg_global",
                   "neg_tokens", "neg_token_valid", "neg_valid", "image_ids", "example_valid")

    def __init__(self, config, workdir: str = "."):
        self.config = config
        self.workdir = workdir
        d = config.data
        cache_root = d.cache_dir or os.path.join(workdir, "feature_cache")
        self.caches = {}
        for split, negs in (("train", True), (d.val_split, False)):
            directory = os.path.join(cache_root, split)
            if not os.path.exists(os.path.join(directory, "meta.json")):
                if d.name != "shapesworld":
                    raise FileNotFoundError(f"config.data.cache_dir: no feature cache at {directory}; build it with "
                                            f"scripts/cache_clip_features.py")
                if jax.process_index() == 0:
                    print(f"[flowclip] encoding ShapesWorld {split} with the frozen CLIP -> {directory}", flush=True)
                    _shapesworld_cache(config, split, directory, negs)
            self.caches[split] = FeatureCache(directory)
        self.dim = self.caches["train"].meta["arrays"]["img_global"]["shape"][-1]
        fc = config.flowclip
        self.head = FlowCLIPHead(self.dim, alpha=fc.alpha, tau_p=fc.tau_p, pool=fc.pool, method=fc.all_pairs,
                                 chunk_size=fc.score_chunk_images, use_local=fc.use_local,
                                 logit_scale_init=fc.logit_scale_init, logit_scale_max=fc.logit_scale_max)
        self.examples_per_step = d.batch_size

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
        scale = jnp.exp(jnp.minimum(params["log_logit_scale"], math.log(self.config.flowclip.logit_scale_max)))
        objective_batch = {"image": {"global": batch["img_global"], "patches": batch["img_patches"]},
                           "pos_text": self._texts(batch, "pos", "pos_valid"),
                           "neg_text": self._texts(batch, "neg", "neg_token_valid"),
                           "image_ids": batch["image_ids"], "neg_valid": batch["neg_valid"]}
        scorer = {k: params[k] for k in ("M", "M_tok", "W")}
        loss, metrics = flowclip_objective(scorer, scale, objective_batch, rng, self.config.flowclip)
        metrics = {("loss/total" if k == "loss" else f"loss/{k}" if k in ("hnb", "cimr") else k): v
                   for k, v in metrics.items()}
        return loss, (metrics, extra)

    def _score_fn(self):
        fc = self.config.flowclip
        return jax.jit(lambda p, img, txt: score_pairs(
            {k: p[k] for k in ("M", "M_tok", "W")}, img, txt, alpha=fc.alpha, tau_p=fc.tau_p, pool=fc.pool,
            method=fc.all_pairs, chunk_size=fc.score_chunk_images, use_local=fc.use_local))

    def score_cache(self, params, cache: FeatureCache):
        """Head scores [n_images, n_records] of every cached image against every record's positive caption."""
        records = cache.records()
        images = cache.images(np.arange(cache.num_images))
        pos = np.array([r["pos"] for r in records])
        score, chunk = self._score_fn(), self.config.eval_caption_chunk
        cols = []
        for s in range(0, len(pos), chunk):
            idx = pos[s:s + chunk]
            txt = cache.texts(np.concatenate([idx, np.repeat(idx[-1:], chunk - len(idx))]))
            cols.append(np.asarray(score(params, images, txt))[:, :len(idx)])
        return np.concatenate(cols, axis=1), np.array([r["image"] for r in records])

    def eval_context(self, variables, split: str) -> dict:
        params = variables["params"]
        d = self.config.data
        directory = os.path.join(d.cache_dir or os.path.join(self.workdir, "feature_cache"), split)
        if not os.path.exists(os.path.join(directory, "meta.json")):
            if d.name != "shapesworld":
                raise FileNotFoundError(f"no feature cache for split {split!r} at {directory}")
            # The frozen CLIP the head was trained on (recorded in the training cache), whatever the config says now.
            _shapesworld_cache(self.config, split, directory, False, self.caches["train"].meta["clip_workdir"])
        sim, caption_to_image = self.score_cache(params, FeatureCache(directory))
        context = {"similarity": sim, "caption_to_image": caption_to_image,
                   "score_name": "flowclip" if self.config.flowclip.use_local else "global_m"}
        if d.name == "shapesworld":
            context.update(_shapesworld_suites_context(self.config, split, params, self._score_fn(),
                                                       self.caches["train"].meta["clip_workdir"]))
        return context

    def evaluate(self, params, extra) -> dict:
        sim, caption_to_image = self.score_cache(params, self.caches[self.config.data.val_split])
        return recall_at_k(sim, caption_to_image)


def _shapesworld_suites_context(config, split, head_params, score, clip_workdir):
    """Suites scored by the head over frozen-CLIP features computed on the fly (negatives are not cached)."""
    from mmjax.data.shapesworld.suites import build_suites
    from mmjax.evaluation.scorers import EmbeddingScorer

    clip = FrozenShapesWorldCLIP(clip_workdir, split, config.flowclip.max_tokens)

    def batched(fn, items):
        outs = [fn(items[s:s + clip.batch_size]) for s in range(0, len(items), clip.batch_size)]
        return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}

    def encode_images(records):
        idx = np.array([r.meta["image_index"] for r in records])
        return batched(clip.encode_images, clip.data["images"][idx])

    scorer = EmbeddingScorer(encode_images, lambda caps: batched(clip.encode_texts, list(caps)),
                             lambda img, txt: score(head_params, img, txt), mode="matrix")
    return {"records": build_suites(clip.data), "score_fn": scorer}
