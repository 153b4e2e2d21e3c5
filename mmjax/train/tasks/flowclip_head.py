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


def _shapesworld_cache(config, split: str, directory: str, with_negatives: bool, clip_workdir: str | None = None):
    """Encodes a ShapesWorld split with the exported frozen CLIP of `clip_workdir` (default `data.clip_workdir`)."""
    from mmjax.data import shapesworld
    from mmjax.models.clip import CLIPConfig, CLIPModel
    from mmjax.train.export import load_exported
    from mmjax.train.tasks.clip_pretrain import normalise_pixels

    clip_workdir = clip_workdir or config.data.clip_workdir
    params, info = load_exported(clip_workdir)
    if info.get("task") != "clip_pretrain":
        raise ValueError(f"{clip_workdir}: exported task is {info.get('task')!r}, not 'clip_pretrain'")
    model = CLIPModel(CLIPConfig.from_dict(info["clip_config"]))
    data = shapesworld.generate(split, preset=info["preset"], seed=info["seed"], mode="pixels")
    tok = shapesworld.ShapesWorld(data["config"]).tokenizer()
    variables = {"params": params["params"]}
    img_fn = jax.jit(lambda v, x: model.apply(v, normalise_pixels(x), method="encode_image"))
    txt_fn = jax.jit(lambda v, i, m: model.apply(v, i, m, method="encode_text"))
    bs = 64

    def padded(fn, *arrays):
        n = len(arrays[0])
        arrays = [np.concatenate([a, np.repeat(a[-1:], bs - n, 0)]) for a in arrays]
        return {k: np.asarray(v)[:n] for k, v in fn(variables, *arrays).items()}

    def encode_text(strings):
        enc = tok.encode(list(strings))
        out = padded(txt_fn, enc.ids, enc.attention_mask.astype(np.int32))
        return out

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
    write_feature_cache(directory, data["images"], texts, encode_image=lambda x: padded(img_fn, x),
                        encode_text=encode_text, records=records, batch_size=bs,
                        max_tokens=config.flowclip.max_tokens, overwrite=True,
                        extra_meta={"source": "shapesworld", "split": split, "clip_workdir":
                                    os.path.abspath(clip_workdir)})


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
    from mmjax.data import shapesworld
    from mmjax.data.shapesworld.suites import build_suites
    from mmjax.evaluation.scorers import EmbeddingScorer
    from mmjax.models.clip import CLIPConfig, CLIPModel
    from mmjax.train.export import load_exported
    from mmjax.train.tasks.clip_pretrain import normalise_pixels

    clip_params, info = load_exported(clip_workdir)
    model = CLIPModel(CLIPConfig.from_dict(info["clip_config"]))
    data = shapesworld.generate(split, preset=info["preset"], seed=info["seed"], mode="pixels")
    tok = shapesworld.ShapesWorld(data["config"]).tokenizer()
    variables = {"params": clip_params["params"]}
    img_fn = jax.jit(lambda v, x: model.apply(v, normalise_pixels(x), method="encode_image"))
    txt_fn = jax.jit(lambda v, i, m: model.apply(v, i, m, method="encode_text"))
    max_tokens = config.flowclip.max_tokens

    def encode_images(records):
        idx = np.array([r.meta["image_index"] for r in records])
        return {k: np.asarray(v) for k, v in img_fn(variables, data["images"][idx]).items()}

    def encode_texts(captions):
        enc = tok.encode(list(captions))
        out = txt_fn(variables, enc.ids, enc.attention_mask.astype(np.int32))
        return {"global": np.asarray(out["global"]), "tokens": np.asarray(out["tokens"])[:, :max_tokens],
                "valid": np.asarray(out["valid"])[:, :max_tokens]}

    scorer = EmbeddingScorer(encode_images, encode_texts, lambda img, txt: score(head_params, img, txt),
                             mode="matrix")
    return {"records": build_suites(data), "score_fn": scorer}
