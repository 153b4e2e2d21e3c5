"""TFDS builder `shapes_world` (docs/design.md#shapesworld-tfds): array_record files, builds and reads without
TensorFlow.

    builder = ShapesWorldBuilder(config="tiny_regions", data_dir=..., file_format="array_record")
    builder.download_and_prepare()
    source = builder.as_data_source("train")   # random access; records are shuffled at write time
Text features come back as bytes; key everything by `image_id`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from mmjax.data.shapesworld.config import MEANING_WIDTH, ShapesWorldConfig
from mmjax.data.shapesworld.generator import ShapesWorld

_REGION_KEYS = ("regions", "region_boxes", "region_mask", "region_kind", "region_object")


@dataclasses.dataclass
class ShapesWorldBuilderConfig(tfds.core.BuilderConfig):
    preset: str = "default"
    mode: str = "regions"
    seed: int = 0


class ShapesWorldBuilder(tfds.core.GeneratorBasedBuilder):
    """ShapesWorld as a TFDS data set (flat features only)."""

    name = "shapes_world"
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release (the generator of docs/design.md#shapesworld)."}
    BUILDER_CONFIGS = [
        ShapesWorldBuilderConfig(name="regions", preset="default", mode="regions"),
        ShapesWorldBuilderConfig(name="pixels", preset="default", mode="pixels"),
        ShapesWorldBuilderConfig(name="tiny_regions", preset="tiny", mode="regions"),
        ShapesWorldBuilderConfig(name="tiny_pixels", preset="tiny", mode="pixels"),
    ]
    DEFAULT_CONFIG_NAME = "regions"

    # TFDS derives `code_path` through `importlib_resources`, which tensorflow-datasets 4.9.x imports lazily but does
    # not always install; the builder's own file is the answer it would compute.
    @tfds.core.utils.py_utils.classproperty
    @classmethod
    def code_path(cls):
        return epath.Path(__file__)

    @property
    def world_config(self) -> ShapesWorldConfig:
        c = self.builder_config
        return ShapesWorldConfig.from_preset(c.preset, mode=c.mode, seed=c.seed)

    def _info(self) -> tfds.core.DatasetInfo:
        cfg = self.world_config
        f = tfds.features
        c = cfg.captions_per_image
        features = {
            "image_id": f.Scalar(dtype=np.int64),
            "obj_shape": f.Tensor(shape=(None,), dtype=np.int32),
            "obj_colour": f.Tensor(shape=(None,), dtype=np.int32),
            "obj_size": f.Tensor(shape=(None,), dtype=np.int32),
            "obj_row": f.Tensor(shape=(None,), dtype=np.int32),
            "obj_col": f.Tensor(shape=(None,), dtype=np.int32),
            "obj_box": f.Tensor(shape=(None, 4), dtype=np.float32),
            "captions": f.Sequence(f.Text()),
            "caption_meaning": f.Tensor(shape=(c, MEANING_WIDTH), dtype=np.int32),
            "caption_unseen": f.Tensor(shape=(c,), dtype=np.bool_),
            "neg_text": f.Sequence(f.Text()),
            "neg_caption": f.Tensor(shape=(None,), dtype=np.int32),
            "neg_type": f.Tensor(shape=(None,), dtype=np.int32),
            "neg_meaning": f.Tensor(shape=(None, MEANING_WIDTH), dtype=np.int32),
            "train_neg_index": f.Tensor(shape=(c,), dtype=np.int32),
            "has_unseen": f.Scalar(dtype=np.bool_),
        }
        if cfg.mode == "pixels":
            features["image"] = f.Tensor(shape=(cfg.image_size, cfg.image_size, 3), dtype=np.uint8)
        else:
            r, d = cfg.num_regions, cfg.region_dim
            features.update({
                "regions": f.Tensor(shape=(r, d), dtype=np.float32),
                "region_boxes": f.Tensor(shape=(r, 4), dtype=np.float32),
                "region_mask": f.Tensor(shape=(r,), dtype=np.bool_),
                "region_kind": f.Tensor(shape=(r,), dtype=np.int32),
                "region_object": f.Tensor(shape=(r,), dtype=np.int32),
            })
        return tfds.core.DatasetInfo(builder=self, description="ShapesWorld (mmjax docs/design.md#shapesworld)",
                                     features=tfds.features.FeaturesDict(features))

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing is downloaded
        return {split: self._generate_examples(split) for split in ("train", "val", "test")}

    def _generate_examples(self, split: str):
        world = ShapesWorld(self.world_config)
        for i in range(world.config.split_size(split)):
            ex = world.example(split, i)
            ex["captions"] = list(ex["captions"])
            ex["neg_text"] = list(ex["neg_text"])
            yield int(ex["image_id"]), ex


def decode_record(record: dict) -> dict:
    """A data-source record with Text features decoded to str (the in-memory example layout)."""
    out = dict(record)
    for key in ("captions", "neg_text"):
        out[key] = [t.decode() if isinstance(t, bytes) else str(t) for t in record[key]]
    return out
