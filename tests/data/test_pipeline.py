"""Input pipeline: layout, determinism / exact resume, per-process sharding, augmentation statistics."""

import numpy as np
import pytest

from mmjax.data.pipeline import (
    BatchIterator, PipelineConfig, drop_caption_tokens, drop_regions, source_from_shapesworld)
from mmjax.data.shapesworld import ShapesWorld, generate


@pytest.fixture(scope="module")
def data():
    return generate("train", preset="tiny", seed=0)


@pytest.fixture(scope="module")
def source(data):
    return source_from_shapesworld(data, ShapesWorld().tokenizer(), with_negatives=True)


def _cfg(**kw):
    base = dict(batch_size=32, seed=3, prefetch=0, process_index=0, process_count=1)
    base.update(kw)
    return PipelineConfig(**base)


def test_layout_and_multi_positive_captions(data, source):
    cfg = _cfg(augment=False)
    batch = BatchIterator(source, cfg).batch_at(0, 0)
    assert batch["image_feats"].shape == (32, 10, 256) and batch["image_mask"].shape == (32, 10)
    assert batch["caption_ids"].shape == (160, 20) and batch["caption_image"].shape == (160,)
    assert batch["neg_caption_ids"].shape == (160, 20) and batch["neg_valid"].dtype == bool
    tok = ShapesWorld().tokenizer()
    for i in (0, 7, 31):
        row = int(batch["example_index"][i])
        assert batch["image_ids"][i] == data["image_ids"][row]
        np.testing.assert_array_equal(batch["image_feats"][i], data["regions"][row])
        caps = [tok.decode(batch["caption_ids"][r]) for r in np.nonzero(batch["caption_image"] == i)[0]]
        assert caps == data["captions"][row]
        for k in range(5):
            j = data["train_neg_index"][row, k]
            if j >= 0:
                assert tok.decode(batch["neg_caption_ids"][i * 5 + k]) == data["neg_text"][j]
            assert batch["neg_valid"][i * 5 + k] == (j >= 0)


def test_epoch_covers_each_image_once(source):
    it = BatchIterator(source, _cfg(augment=False))
    seen = np.concatenate([it.batch_at(0, s)["example_index"] for s in range(it.steps_per_epoch)])
    assert len(seen) == len(set(seen.tolist())) == 512
    assert not np.array_equal(it.batch_at(0, 0)["example_index"], it.batch_at(1, 0)["example_index"])


def test_resume_exact_with_prefetch(source):
    cfg = _cfg(prefetch=2)
    it = BatchIterator(source, cfg)
    run = [next(it) for _ in range(20)]  # crosses the epoch boundary (16 steps per epoch)
    assert it.position == (1, 4)
    it.close()
    resumed = BatchIterator(source, cfg, start=(1, 1))
    for a, b in zip(run[17:], [next(resumed) for _ in range(3)]):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    resumed.close()


def test_process_shards_concatenate_to_global_batch(source):
    full = BatchIterator(source, _cfg()).batch_at(2, 5)
    parts = [BatchIterator(source, _cfg(process_index=p, process_count=4)).batch_at(2, 5) for p in range(4)]
    for key in full:
        if key == "caption_image":
            continue
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), full[key], err_msg=key)
    assert parts[1]["caption_image"].max() == 7
    with pytest.raises(ValueError, match="divisible"):
        BatchIterator(source, _cfg(process_count=3))


def test_num_epochs_and_partial_batches(source):
    it = BatchIterator(source, _cfg(batch_size=100, drop_remainder=False, num_epochs=1, shuffle=False, augment=False))
    batches = list(it)
    assert len(batches) == 6 and batches[-1]["example_valid"].sum() == 12
    assert not batches[-1]["neg_valid"][60:].any()


def test_region_drop_statistics():
    rng = np.random.default_rng(0)
    mask = np.ones((4000, 10), bool)
    mask[:, 8:] = False
    new = drop_regions(rng, mask, 0.2, 1)
    assert not new[:, 8:].any() and new.sum(1).min() >= 1
    assert abs(1 - new[:, :8].mean() - 0.2) < 0.01
    one = drop_regions(rng, np.eye(10, dtype=bool).repeat(100, 0), 0.99, 1)
    assert np.all(one.sum(1) == 1)  # a single region is never dropped


def test_caption_token_drop_statistics():
    rng = np.random.default_rng(0)
    m, t = 4000, 20
    ids = np.zeros((m, t), np.int32)
    ids[:, 0], ids[:, 11] = 2, 3
    ids[:, 1:11] = 10  # ten valid word tokens, all id 10
    att, valid = ids > 0, ids >= 5
    new, new_att, new_valid = drop_caption_tokens(
        rng, ids, att, valid, p=0.2, mask_frac=0.5, random_frac=0.1, mask_id=4, pad_id=0,
        random_ids=np.arange(5, 38), min_tokens=1)
    tokens = 10 * m
    assert abs((new == 4).sum() / tokens - 0.10) < 0.01  # 0.2 · 0.5 masked
    assert abs((1 - new_valid.sum() / tokens) - 0.08) < 0.01  # 0.2 · 0.4 deleted
    changed_random = ((new != 10) & (new != 4) & new_valid).sum() / tokens
    assert abs(changed_random - 0.02) < 0.006  # 0.2 · 0.1 random (a few redraw id 10)
    # re-packed: [CLS] valid... [SEP] padding, attention is a prefix
    n = new_att.sum(1)
    assert np.all(new[:, 0] == 2) and np.all(new[np.arange(m), n - 1] == 3)
    assert np.all(new_att == (np.arange(t)[None] < n[:, None])) and np.all(new[~new_att] == 0)
    assert new_valid.sum(1).min() >= 1


def test_augmentation_changes_batches_deterministically(source):
    a = BatchIterator(source, _cfg()).batch_at(0, 0)
    b = BatchIterator(source, _cfg()).batch_at(0, 0)
    plain = BatchIterator(source, _cfg(augment=False)).batch_at(0, 0)
    np.testing.assert_array_equal(a["caption_ids"], b["caption_ids"])
    assert not np.array_equal(a["caption_ids"], plain["caption_ids"])
    assert a["image_mask"].sum() < plain["image_mask"].sum()
    assert np.all(a["image_feats"][~a["image_mask"]] == 0)


def test_pixels_source():
    d = generate("val", preset="tiny", seed=0, mode="pixels", limit=16)
    src = source_from_shapesworld(d, ShapesWorld().tokenizer())
    batch = BatchIterator(src, _cfg(batch_size=8)).batch_at(0, 1)
    assert batch["images"].shape == (8, 64, 64, 3) and "image_mask" not in batch and "neg_valid" not in batch
