"""The in-memory ShapesWorld generator (docs/design.md#shapesworld-splits, docs/design.md#shapesworld-delivery).

Every example is a pure function of (config, split, index): its rng is
`Generator(PCG64(SeedSequence([seed, split_code, index])))`, consumed in the fixed order
scene → captions → negatives → training-negative pick → pixels/regions. Any index can be generated alone.

`example(split, i)` returns the flat per-image dict of the TFDS features (§8.2):
    image_id int64; image (H,W,3) uint8 | regions (R,F) f32, region_boxes (R,4), region_mask (R,), region_kind (R,),
    region_object (R,); obj_shape/obj_colour/obj_size/obj_row/obj_col (n,) int32; obj_box (n,4) f32;
    captions list[str] (5); caption_meaning (5,10) int32; caption_unseen (5,) bool; neg_text list[str] (all
    negatives of all captions, flattened); neg_caption, neg_type (M,) int32; neg_meaning (M,10) int32;
    train_neg_index (5,) int32 (index into neg_text, −1 = no training negative); has_unseen bool.
`arrays(split)` stacks a split (see `generate` in `__init__` for the layout).
"""

from __future__ import annotations

import functools
from typing import Iterator

import numpy as np

from mmjax.data.shapesworld import captions as cap
from mmjax.data.shapesworld.config import (
    MEANING_WIDTH, NEG_TYPES, ShapesWorldConfig, split_code, vocabulary_words)
from mmjax.data.shapesworld.negatives import caption_negatives, pick_training_negative
from mmjax.data.shapesworld.regions import region_constants, render_regions
from mmjax.data.shapesworld.render import render_pixels
from mmjax.data.shapesworld.scene import Scene, sample_scene

IMAGE_ID_STRIDE = 10_000_000


def example_rng(seed: int, split: str, index: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, split_code(split), index])))


class ShapesWorld:
    """Deterministic generator of ShapesWorld examples for one config."""

    def __init__(self, config: ShapesWorldConfig | None = None):
        self.config = config or ShapesWorldConfig()

    @functools.cached_property
    def constants(self):
        return region_constants(self.config)

    def scene_and_text(self, split: str, index: int):
        """(rng, scene, caption meanings, caption texts, negatives per caption, training-negative picks)."""
        cfg = self.config
        if not 0 <= index < IMAGE_ID_STRIDE:
            raise ValueError(f"index must be in [0, {IMAGE_ID_STRIDE}), got {index}")
        rng = example_rng(cfg.seed, split, index)
        scene = sample_scene(rng, cfg, split)
        meanings = cap.choose_captions(rng, cfg, scene)
        texts = [cap.render(m) for m in meanings]
        for m, t in zip(meanings, texts):
            if not cap.truth(m, scene):  # the generator's own invariant (§4); never expected to fire
                raise AssertionError(f"positive caption {t!r} is false on its scene")
        negatives = [caption_negatives(rng, cfg, m, t, scene, split) for m, t in zip(meanings, texts)]
        u = rng.random(len(meanings))
        picks = [pick_training_negative(float(ui), cfg, negs) for ui, negs in zip(u, negatives)]
        return rng, scene, meanings, texts, negatives, picks

    def example(self, split: str, index: int) -> dict:
        cfg = self.config
        rng, scene, meanings, texts, negatives, picks = self.scene_and_text(split, index)
        heldout = cfg.heldout_ids
        ex = {
            "image_id": np.int64(split_code(split) * IMAGE_ID_STRIDE + index),
            "obj_shape": np.asarray(scene.shape, np.int32),
            "obj_colour": np.asarray(scene.colour, np.int32),
            "obj_size": np.asarray(scene.size, np.int32),
            "obj_row": np.asarray(scene.row, np.int32),
            "obj_col": np.asarray(scene.col, np.int32),
            "obj_box": scene.box.astype(np.float32),
            "captions": texts,
            "caption_meaning": np.asarray(meanings, np.int32).reshape(len(texts), MEANING_WIDTH),
            "caption_unseen": np.array([any(p in heldout for p in cap.mentioned_pairs(m)) for m in meanings]),
            "has_unseen": np.bool_(scene.has_unseen),
        }
        neg_text, neg_caption, neg_type, neg_meaning, train_idx = [], [], [], [], []
        for k, (negs, pick) in enumerate(zip(negatives, picks)):
            train_idx.append(len(neg_text) + pick if pick >= 0 else -1)
            for neg in negs:
                neg_text.append(neg.text)
                neg_caption.append(k)
                neg_type.append(neg.type_id)
                neg_meaning.append(neg.meaning)
        ex["neg_text"] = neg_text
        ex["neg_caption"] = np.asarray(neg_caption, np.int32)
        ex["neg_type"] = np.asarray(neg_type, np.int32)
        ex["neg_meaning"] = np.asarray(neg_meaning, np.int32).reshape(len(neg_text), MEANING_WIDTH)
        ex["train_neg_index"] = np.asarray(train_idx, np.int32)
        if cfg.mode == "regions":
            ex.update(render_regions(rng, cfg, self.constants, scene))
        else:
            ex["image"] = render_pixels(rng, cfg, scene)
        return ex

    def iterate(self, split: str) -> Iterator[dict]:
        for i in range(self.config.split_size(split)):
            yield self.example(split, i)

    def scene(self, split: str, index: int) -> Scene:
        return self.scene_and_text(split, index)[1]

    @staticmethod
    def truth(meaning, scene: Scene) -> bool:
        return cap.truth(meaning, scene)

    def tokenizer(self):
        from mmjax.data.tokenizers import WordTokenizer
        return WordTokenizer(vocabulary_words(), max_len=self.config.max_len)

    def arrays(self, split: str, *, limit: int | None = None, progress: bool = False) -> dict:
        n = self.config.split_size(split) if limit is None else limit
        return stack_examples((self.example(split, i) for i in range(n)), n, self.config, progress=progress)

    def suites(self, split: str = "test", data: dict | None = None) -> dict:
        """Compositional suites (name → records) plus `'retrieval'` (see `suites.py`)."""
        from mmjax.data.shapesworld.suites import build_suites, retrieval_suite
        data = self.arrays(split) if data is None else data
        return {**build_suites(data), "retrieval": retrieval_suite(data)}


def stack_examples(examples, n: int, cfg: ShapesWorldConfig, progress: bool = False) -> dict:
    """Stack per-image examples into the `generate` layout (negatives flattened across images)."""
    max_obj = cfg.max_objects
    c = cfg.captions_per_image
    out = {
        "image_ids": np.zeros(n, np.int64),
        "captions": [],
        "caption_meaning": np.zeros((n, c, MEANING_WIDTH), np.int32),
        "caption_unseen": np.zeros((n, c), bool),
        "has_unseen": np.zeros(n, bool),
        "obj_count": np.zeros(n, np.int32),
        "obj_box": np.zeros((n, max_obj, 4), np.float32),
        "neg_text": [],
        "neg_table": np.full((n, c, len(NEG_TYPES)), -1, np.int32),
        "train_neg_index": np.full((n, c), -1, np.int32),
        "scenes": [],
    }
    for key in ("obj_shape", "obj_colour", "obj_size", "obj_row", "obj_col"):
        out[key] = np.full((n, max_obj), -1, np.int32)
    neg_image, neg_caption, neg_type, neg_meaning = [], [], [], []
    step = max(1, n // 10)
    for i, ex in enumerate(examples):
        if progress and i % step == 0:
            print(f"  shapesworld: {i}/{n}", flush=True)
        if i == 0:
            if cfg.mode == "pixels":
                out["images"] = np.zeros((n, *ex["image"].shape), np.uint8)
            else:
                for key in ("regions", "region_boxes", "region_mask", "region_kind", "region_object"):
                    out[key] = np.zeros((n, *ex[key].shape), ex[key].dtype)
        if cfg.mode == "pixels":
            out["images"][i] = ex["image"]
        else:
            for key in ("regions", "region_boxes", "region_mask", "region_kind", "region_object"):
                out[key][i] = ex[key]
        k = len(ex["obj_shape"])
        out["image_ids"][i] = ex["image_id"]
        out["obj_count"][i] = k
        for key in ("obj_shape", "obj_colour", "obj_size", "obj_row", "obj_col"):
            out[key][i, :k] = ex[key]
        out["obj_box"][i, :k] = ex["obj_box"]
        out["captions"].append(list(ex["captions"]))
        out["caption_meaning"][i] = ex["caption_meaning"]
        out["caption_unseen"][i] = ex["caption_unseen"]
        out["has_unseen"][i] = ex["has_unseen"]
        base = len(out["neg_text"])
        out["neg_text"].extend(ex["neg_text"])
        out["neg_table"][i, ex["neg_caption"], ex["neg_type"]] = base + np.arange(len(ex["neg_text"]))
        out["train_neg_index"][i] = np.where(ex["train_neg_index"] >= 0, ex["train_neg_index"] + base, -1)
        neg_image.append(np.full(len(ex["neg_text"]), i, np.int32))
        neg_caption.append(ex["neg_caption"])
        neg_type.append(ex["neg_type"])
        neg_meaning.append(ex["neg_meaning"])
        out["scenes"].append(_scene_from_example(ex))
    out["neg_image"] = np.concatenate(neg_image) if neg_image else np.zeros(0, np.int32)
    out["neg_caption"] = np.concatenate(neg_caption) if neg_caption else np.zeros(0, np.int32)
    out["neg_type"] = np.concatenate(neg_type) if neg_type else np.zeros(0, np.int32)
    out["neg_meaning"] = np.concatenate(neg_meaning) if neg_meaning else np.zeros((0, MEANING_WIDTH), np.int32)
    return out


def _scene_from_example(ex: dict) -> Scene:
    shape = tuple(int(v) for v in ex["obj_shape"])
    colour = tuple(int(v) for v in ex["obj_colour"])
    return Scene(shape=shape, colour=colour, size=tuple(int(v) for v in ex["obj_size"]),
                 row=tuple(int(v) for v in ex["obj_row"]), col=tuple(int(v) for v in ex["obj_col"]),
                 box=np.asarray(ex["obj_box"], np.float64), has_unseen=bool(ex["has_unseen"]))
