"""TFDS build + read round-trip without TensorFlow (docs/design.md#shapesworld-tfds)."""

import sys

import numpy as np

from mmjax.data.shapesworld import ShapesWorld
from mmjax.data.shapesworld.generator import IMAGE_ID_STRIDE
from mmjax.data.shapesworld.tfds_builder import ShapesWorldBuilder, decode_record


def _build_and_compare(config_name, tmp_path):
    builder = ShapesWorldBuilder(config=config_name, data_dir=str(tmp_path), file_format="array_record")
    builder.download_and_prepare()
    assert "tensorflow" not in sys.modules
    world = ShapesWorld(builder.world_config)
    for split, n in (("train", 512), ("val", 64), ("test", 64)):
        source = builder.as_data_source(split)
        assert len(source) == n
        ids = []
        for j in range(0, n, 1 if split != "train" else 16):  # all of val/test, every 16th record of train
            rec = decode_record(source[j])
            image_id = int(rec["image_id"])
            ids.append(image_id)
            ref = world.example(split, image_id % IMAGE_ID_STRIDE)
            assert set(rec) == set(ref)
            for key, value in ref.items():
                if isinstance(value, list):
                    assert rec[key] == value, key
                else:
                    np.testing.assert_array_equal(np.asarray(rec[key]), value, err_msg=key)
        if split != "train":
            assert sorted(ids) == [i + {"val": 1, "test": 2}[split] * IMAGE_ID_STRIDE
                                   for i in range(n)]


def test_tiny_regions_round_trip(tmp_path):
    _build_and_compare("tiny_regions", tmp_path)


def test_tiny_pixels_round_trip(tmp_path):
    _build_and_compare("tiny_pixels", tmp_path)
