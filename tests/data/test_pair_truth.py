"""The pipeline's `caption_true` (docs/design.md#false-negatives) against the test-only text oracle: every caption of
the global batch parsed from its text and checked on every local image's scene graph."""

import dataclasses

import numpy as np
import pytest

from mmjax.data.pipeline import BatchIterator, PipelineConfig, source_from_shapesworld
from mmjax.data.shapesworld import ShapesWorld, generate
from tests.data.shapesworld_oracle import holds, objects_of


@pytest.fixture(scope="module")
def data():
    return generate("train", preset="tiny", seed=0)


@pytest.fixture(scope="module")
def source(data):
    return source_from_shapesworld(data, ShapesWorld().tokenizer())


def _cfg(**kw):
    return PipelineConfig(**{**dict(batch_size=16, seed=1, prefetch=0, process_index=0, process_count=1,
                                    pair_truth=True), **kw})


def test_caption_true_equals_the_text_oracle(data, source):
    batch = BatchIterator(source, _cfg()).batch_at(0, 3)
    rows = batch["example_index"]
    texts = [t for r in rows for t in data["captions"][r]]
    oracle = np.array([[holds(t, objects_of(data, r)) for t in texts] for r in rows])
    assert batch["caption_true"].shape == (16, 80) and batch["caption_true"].dtype == bool
    np.testing.assert_array_equal(batch["caption_true"], oracle)
    own = batch["caption_image"][None, :] == np.arange(16)[:, None]
    assert batch["caption_true"][own].all()                       # a caption is true of its own image
    assert (batch["caption_true"] & ~own).any()                    # and here of some other image too


def test_process_shards_hold_their_rows_of_the_global_mask(source):
    full = BatchIterator(source, _cfg()).batch_at(1, 2)["caption_true"]
    parts = [BatchIterator(source, _cfg(process_index=p, process_count=4)).batch_at(1, 2)["caption_true"]
             for p in range(4)]
    assert all(p.shape == (4, 80) for p in parts)                  # local images × every caption of the batch
    np.testing.assert_array_equal(np.concatenate(parts), full)


def test_off_by_default_and_refused_without_a_truth(source):
    assert "caption_true" not in BatchIterator(source, _cfg(pair_truth=False)).batch_at(0, 0)
    blind = dataclasses.replace(source, pair_truth=None)
    with pytest.raises(ValueError, match="needs a source that knows which captions are true"):
        BatchIterator(blind, _cfg())


def test_in_batch_false_negatives_are_common_on_the_default_preset():
    """The measured reason for the option (docs/design.md#false-negatives): at the study's batch of 128 images,
    every image has some other image's caption true of it."""
    d = generate("train", seed=0, limit=256)
    src = source_from_shapesworld(d, ShapesWorld().tokenizer())
    batch = BatchIterator(src, _cfg(batch_size=128)).batch_at(0, 0)
    other = batch["caption_true"] & ~(batch["caption_image"][None, :] == np.arange(128)[:, None])
    assert other.any(axis=1).mean() > 0.9
    assert 0.005 < other.mean() < 0.05
