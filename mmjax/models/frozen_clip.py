"""A frozen ShapesWorld CLIP (the export of `configs/clip_shapes.py`) as the feature extractor of the Flow-CLIP
heads: encoders for images and caption strings, and the ShapesWorld feature caches the heads train on.

Two bases share this path (`data.mode` of the CLIP run): the pixel ViT (`CLIPModel`, images uint8 [N, 64, 64, 3])
and the region transformer (`RegionCLIPModel`, regions mode). A regions-mode image is handed around as one array
[R, F + 1] — its region vectors with the validity mask as the last channel (`pack_regions`) — so every consumer
(feature caches, suites, probes) slices images the same way in both modes.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np

from mmjax.batching import batched_apply
from mmjax.data.shapesworld.config import language_prior
from mmjax.models.clip import CLIPConfig, CLIPModel
from mmjax.models.region_clip import RegionCLIPModel
from mmjax.models.feature_cache import write_feature_cache


def normalise_pixels(images):
    """uint8 [B,H,W,3] → float32 in [−1, 1] (the ShapesWorld CLIP's own preprocessing)."""
    return images.astype(np.float32) / 127.5 - 1.0


def pack_regions(regions, region_mask) -> np.ndarray:
    """[N, R, F] region vectors and [N, R] mask → one float32 array [N, R, F + 1] (the mask last)."""
    return np.concatenate([np.asarray(regions, np.float32), np.asarray(region_mask, np.float32)[..., None]], -1)


def image_inputs(data: dict, mode: str) -> np.ndarray:
    """A generated split's images as the CLIP of `mode` takes them: pixels, or packed regions."""
    return data["images"] if mode == "pixels" else pack_regions(data["regions"], data["region_mask"])


def encode_image(model, variables, images, mode: str):
    """The base's {"global", "patches"} of a batch of `image_inputs` (pixels normalised, regions unpacked)."""
    if mode == "pixels":
        return model.apply(variables, normalise_pixels(images), method="encode_image")
    return model.apply(variables, images[..., :-1], images[..., -1] > 0.5, method="encode_image")


class FrozenShapesWorldCLIP:
    """An exported ShapesWorld CLIP (frozen: `params`, `info` = the export of a `clip_pretrain` run) with the split
    it was trained on, encoding images and caption strings in fixed-size batches (one compilation each). Outputs are
    the raw Flow-CLIP inputs: images {"global", "patches"}, texts {"global", "tokens", "valid"} (truncated to
    `max_tokens`). `clip_workdir` is recorded in the caches written with it. `limit`: only the split's first `limit`
    images (a notebook-sized run; the same scenes as the full split's first ones)."""

    batch_size = 64

    def __init__(self, params, info: dict, clip_workdir: str, split: str, max_tokens: int, *,
                 limit: int | None = None):
        from mmjax.data import shapesworld

        if info.get("task") != "clip_pretrain":
            raise ValueError(f"{clip_workdir}: exported task is {info.get('task')!r}, not 'clip_pretrain'")
        self.clip_workdir = os.path.abspath(clip_workdir)
        self.mode = info.get("mode", "pixels")  # exports made before the region base are pixel CLIPs
        config = CLIPConfig.from_dict(info["clip_config"])
        model = CLIPModel(config) if self.mode == "pixels" else RegionCLIPModel(config)
        self.data = shapesworld.generate(split, preset=info["preset"], seed=info["seed"], mode=self.mode, limit=limit,
                                         **language_prior(info.get("language_prior", "none")))
        self.images = image_inputs(self.data, self.mode)  # what `encode_images` takes, row per image
        self.tokenizer = shapesworld.ShapesWorld(self.data["config"]).tokenizer()
        self.max_tokens = max_tokens
        self._variables = {"params": params["params"]}
        self._img_fn = jax.jit(lambda v, x: encode_image(model, v, x, self.mode))
        self._txt_fn = jax.jit(lambda v, i, m: model.apply(v, i, m, method="encode_text"))

    def encode_images(self, images):
        """Rows of `self.images` (pixels, or packed regions) -> {"global", "patches"}."""
        return batched_apply(functools.partial(self._img_fn, self._variables), (np.asarray(images),),
                             batch_size=self.batch_size, name=None, jit=False)

    def encode_texts(self, strings):
        """n strings -> {"global", "tokens", "valid"}."""
        enc = self.tokenizer.encode(list(strings))
        out = batched_apply(functools.partial(self._txt_fn, self._variables),
                            (enc.ids, enc.attention_mask.astype(np.int32)), batch_size=self.batch_size, name=None,
                            jit=False)
        out["tokens"], out["valid"] = out["tokens"][:, :self.max_tokens], out["valid"][:, :self.max_tokens]
        return out


def write_shapesworld_cache(clip: FrozenShapesWorldCLIP, directory: str, *, split: str, with_negatives: bool,
                            max_tokens: int) -> None:
    """Encodes `clip.data` (a generated split) into a feature cache: every (image, caption) record, with the
    record's typed hard negative when `with_negatives` (training)."""
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
    write_feature_cache(directory, clip.images, texts, encode_image=clip.encode_images,
                        encode_text=clip.encode_texts, records=records, batch_size=clip.batch_size,
                        max_tokens=max_tokens, overwrite=True,
                        extra_meta={"source": "shapesworld", "split": split,
                                    "clip_workdir": clip.clip_workdir})
