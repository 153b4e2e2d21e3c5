"""CLIP image preprocessing: a hand-computed example, agreement with transformers' CLIPImageProcessor (Pillow
backend, no torch needed), bbox crops, and the lazy block-decoding sequence."""

import numpy as np
import pytest
from PIL import Image

from mmjax.data.clip_preprocess import (CLIP_MEAN, CLIP_STD, ClipImageSequence, center_crop, preprocess_batch,
                                        preprocess_image, resize_shortest_side)
from mmjax.data.records import CompositionalRecord


def _random_uint8(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def test_hand_computed_crop_and_normalisation():
    # Height 4 is already the shortest side = image_size, so Pillow's resize is the identity; the 4 × 7 image is
    # center-cropped to columns (7 − 4) // 2 = 1 … 4, then scaled and normalised per channel.
    pixels = np.arange(4 * 7 * 3, dtype=np.uint8).reshape(4, 7, 3)
    out = preprocess_image(pixels, 4)
    want = (pixels[:, 1:5].astype(np.float64) / 255 - np.array(CLIP_MEAN)) / np.array(CLIP_STD)
    assert out.shape == (4, 4, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-6)


def test_constant_image_any_shape():
    # A constant image stays constant under bicubic resizing; only the output size and the normalisation matter.
    pixels = np.full((13, 29, 3), (255, 0, 128), np.uint8)
    out = preprocess_image(pixels, 8)
    want = (np.array([255, 0, 128]) / 255 - np.array(CLIP_MEAN)) / np.array(CLIP_STD)
    assert out.shape == (8, 8, 3)
    np.testing.assert_allclose(out, np.broadcast_to(want, out.shape), atol=1e-6)


def test_resize_sizes_truncate_long_side():
    assert resize_shortest_side(Image.new("RGB", (30, 20)), 16).size == (24, 16)   # 16 * 30 / 20 = 24
    assert resize_shortest_side(Image.new("RGB", (7, 10)), 16).size == (16, 22)    # int(22.857) = 22
    assert center_crop(np.zeros((22, 16, 3)), 16).shape == (16, 16, 3)
    with pytest.raises(ValueError, match="smaller than the crop"):
        center_crop(np.zeros((10, 16, 3)), 16)


@pytest.mark.parametrize("shape,size", [((23, 37, 3), 16), ((40, 17, 3), 16), ((16, 16, 3), 16), ((9, 12, 3), 16),
                                        ((300, 451, 3), 224), ((31, 45), 16)])
def test_matches_transformers_clip_image_processor(shape, size):
    try:
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil as Processor
    except ImportError:
        try:  # older transformers: the slow processor is numpy + Pillow already
            from transformers import CLIPImageProcessor as Processor
        except ImportError:
            pytest.skip("transformers has no CLIPImageProcessor")
    processor = Processor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    image = Image.fromarray(_random_uint8(shape, seed=sum(shape)))
    want = processor(image, return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)  # NCHW → HWC
    got = preprocess_image(image, size)
    assert got.shape == want.shape == (size, size, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_bbox_crop_comes_first(tmp_path):
    pixels = _random_uint8((30, 40, 3), seed=1)
    path = tmp_path / "img.png"
    Image.fromarray(pixels).save(path)
    record = CompositionalRecord(image=str(path), captions=("a", "b"), correct=0, task="vg_relation",
                                 bbox=(5, 3, 20, 12))
    want = preprocess_image(pixels[3:15, 5:25], 8)
    np.testing.assert_allclose(preprocess_image(record, 8), want, atol=1e-6)
    np.testing.assert_allclose(preprocess_image(str(path), 8, bbox=(5, 3, 20, 12)), want, atol=1e-6)
    np.testing.assert_allclose(preprocess_image(pixels, 8, bbox=(5, 3, 20, 12)), want, atol=1e-6)


def test_sequence_streams_blocks_in_order(tmp_path):
    paths = []
    for k in range(5):
        path = tmp_path / f"{k}.jpg" if k % 2 else tmp_path / f"{k}.png"
        Image.fromarray(_random_uint8((10 + k, 14, 3), seed=k)).save(path)
        paths.append(str(path))
    seq = ClipImageSequence(paths, 8, block_size=2, num_workers=2)
    try:
        assert len(seq) == 5
        items = [seq[i] for i in range(5)]
        assert seq._block.shape[0] == 1  # only the last (partial) block is held
        for path, item in zip(paths, items):
            np.testing.assert_array_equal(item, preprocess_image(path, 8))
        np.testing.assert_array_equal(seq[1:4], np.stack(items[1:4]))
        np.testing.assert_array_equal(seq[-1], items[-1])
        with pytest.raises(IndexError, match="out of range for 5 images"):
            seq[5]
    finally:
        seq.close()
    assert preprocess_batch(paths[:2], 8).shape == (2, 8, 8, 3)


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"uint8 \[H, W\].*float64 \(4, 4, 3\)"):
        preprocess_image(np.zeros((4, 4, 3)), 4)
    with pytest.raises(ValueError, match="positive int"):
        preprocess_image(np.zeros((4, 4, 3), np.uint8), 0)
    with pytest.raises(FileNotFoundError):
        preprocess_image(str(tmp_path / "missing.jpg"), 4)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    with pytest.raises(OSError, match="broken.jpg"):
        preprocess_image(str(broken), 4)
