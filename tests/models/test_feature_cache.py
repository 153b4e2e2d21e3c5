"""Feature cache: written in batches from a frozen tiny CLIP, read back memory-mapped without pickle, and batched
into Flow-CLIP training records (`mmjax.data.cached_records`)."""

import json
from functools import partial

import jax
import numpy as np
import pytest

from mmjax.models.clip import CLIPConfig, CLIPModel
from mmjax.data.cached_records import CachedRecordIterator
from mmjax.models.feature_cache import FeatureCache, clip_encoders, write_feature_cache

TEXTS = ["a cat", "the dog and a cat", "dog", "a big cat on a dog", "cat cat cat cat cat cat", "a", "dog dog",
         "the cat"]
RECORDS = [{"image": 0, "pos": 0, "neg": 2, "image_id": 10, "pos_text": "a cat"},
           {"image": 1, "pos": 1, "neg": -1, "image_id": 11},
           {"image": 0, "pos": 7, "neg": 5, "image_id": 10},
           {"image": 6, "pos": 3, "neg": 4, "image_id": 16},
           {"image": 2, "pos": 6, "neg": 0, "image_id": 12}]


@pytest.fixture(scope="module")
def tiny_clip(hf_tiny_clip_config, hf_random_params, tmp_path_factory, hf_write_tiny_clip_tokenizer):
    from transformers import CLIPTokenizerFast

    model = CLIPModel(CLIPConfig.from_dict(hf_tiny_clip_config))
    ids = np.zeros((1, 4), np.int32)
    params = hf_random_params(model, np.zeros((1, 16, 16, 3), np.float32), ids, ids + 1)
    directory = tmp_path_factory.mktemp("tok")
    hf_write_tiny_clip_tokenizer(directory)
    tokenizer = CLIPTokenizerFast.from_pretrained(directory, local_files_only=True)
    images = np.random.default_rng(0).normal(size=(7, 16, 16, 3)).astype(np.float32)
    enc = tokenizer(TEXTS, padding="max_length", max_length=16, return_tensors="np")
    direct = {  # one un-batched pass, the oracle for the batched writer
        "image": jax.jit(partial(model.apply, method="encode_image"))({"params": params}, images),
        "text": jax.jit(partial(model.apply, method="encode_text"))({"params": params}, enc["input_ids"],
                                                                      enc["attention_mask"]),
    }
    return model, params, tokenizer, images, jax.tree.map(np.asarray, direct)


@pytest.mark.parametrize("dtype,atol", [(np.float16, 2e-3), (np.float32, 1e-5)])
def test_cache_round_trip(tmp_path, tiny_clip, dtype, atol):
    model, params, tokenizer, images, direct = tiny_clip
    encode_image, encode_text = clip_encoders(model, params, tokenizer, batch_size=3)
    meta = write_feature_cache(tmp_path / "cache", images, TEXTS, encode_image=encode_image, encode_text=encode_text,
                               records=RECORDS, batch_size=3, max_tokens=5, dtype=dtype)
    # Plain .npy files: loadable without pickle.
    for name in ("img_global", "img_patches", "txt_global", "txt_tokens", "txt_valid"):
        np.load(tmp_path / "cache" / f"{name}.npy", allow_pickle=False)
    cache = FeatureCache(tmp_path / "cache")
    assert cache.meta == json.loads((tmp_path / "cache" / "meta.json").read_text()) == json.loads(json.dumps(meta))
    assert (cache.num_images, cache.num_texts, meta["text_length"], meta["num_records"]) == (7, 8, 5, 5)
    arrays = cache.arrays
    assert arrays["img_patches"].shape == (7, 16, 20) and arrays["img_patches"].dtype == dtype
    assert arrays["txt_tokens"].shape == (8, 5, 20) and arrays["txt_valid"].dtype == bool
    assert isinstance(arrays["img_global"], np.memmap)

    scale = np.abs(direct["image"]["patches"]).max()
    np.testing.assert_allclose(arrays["img_global"], direct["image"]["global"], atol=atol * scale)
    np.testing.assert_allclose(arrays["img_patches"], direct["image"]["patches"], atol=atol * scale)
    np.testing.assert_allclose(arrays["txt_global"], direct["text"]["global"], atol=atol * scale)
    np.testing.assert_allclose(arrays["txt_tokens"], direct["text"]["tokens"][:, :5], atol=atol * scale)
    np.testing.assert_array_equal(arrays["txt_valid"], direct["text"]["valid"][:, :5])
    dropped = direct["text"]["valid"][:, 5:].sum(1)
    assert meta["truncated_valid_tokens"] == dropped.sum() > 0 and meta["truncated_texts"] == (dropped > 0).sum()

    # Gathers return float32 copies in the order asked, duplicates included.
    texts = cache.texts(np.array([7, 0, 7]))
    assert texts["tokens"].dtype == np.float32 and texts["valid"].dtype == bool
    np.testing.assert_array_equal(texts["tokens"], arrays["txt_tokens"][[7, 0, 7]])
    np.testing.assert_array_equal(cache.images(np.array([6, 1]))["patches"], arrays["img_patches"][[6, 1]])
    assert cache.images(np.array([2]), dtype=None)["global"].dtype == dtype  # storage dtype on request

    assert cache.records() == RECORDS
    batches = CachedRecordIterator(cache, batch_size=2, seed=0)
    assert batches.steps_per_epoch == 2  # 5 records: the partial batch is dropped
    for step in range(2):
        batch = batches.batch_at(0, step)
        for k in range(2):
            rec = next(r for r in RECORDS if np.array_equal(arrays["txt_global"][r["pos"]].astype(np.float32),
                                                           batch["pos_global"][k]))
            np.testing.assert_array_equal(batch["img_patches"][k], arrays["img_patches"][rec["image"]])
            assert batch["image_ids"][k] == rec["image_id"] and batch["neg_valid"][k] == (rec["neg"] >= 0)
            if rec["neg"] >= 0:
                np.testing.assert_array_equal(batch["neg_global"][k], arrays["txt_global"][rec["neg"]])
            else:
                assert not batch["neg_token_valid"][k].any()  # a record without T⁻ has no valid negative tokens


def test_writer_streams_bounded_batches_from_a_lazy_dataset(tmp_path):
    """Encoders see at most batch_size items; images come from a lazy sequence (never materialised whole)."""

    class LazyImages:
        def __init__(self, n):
            self.n, self.max_index = n, -1

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            self.max_index = max(self.max_index, i)
            return np.full((2, 2, 3), i, np.float32)

    sizes = []

    def encode_image(x):
        sizes.append(len(x))
        return {"global": x.reshape(len(x), -1)[:, :4], "patches": x.reshape(len(x), 4, 3)}

    def encode_text(strings):
        sizes.append(len(strings))
        n = np.array([len(s) for s in strings])
        return {"global": np.stack([n, n], 1).astype(np.float32),
                "tokens": np.ones((len(n), 6, 2), np.float32) * n[:, None, None],
                "valid": np.arange(6)[None] < n[:, None]}

    images = LazyImages(11)
    meta = write_feature_cache(tmp_path / "c", images, ["ab", "abcdefgh", "a"], encode_image=encode_image,
                               encode_text=encode_text, batch_size=4, max_tokens=3)
    assert sizes == [4, 4, 3, 3] and images.max_index == 10
    cache = FeatureCache(tmp_path / "c")
    np.testing.assert_array_equal(cache.arrays["img_global"][:, 0], np.arange(11))
    np.testing.assert_array_equal(cache.arrays["txt_valid"], [[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert meta["truncated_valid_tokens"] == 3 and meta["truncated_texts"] == 1


def _fake_encoders(value=1.0):
    def encode_image(x):
        return {"global": np.full((len(x), 2), value, np.float32), "patches": np.zeros((len(x), 3, 2), np.float32)}

    def encode_text(strings):
        return {"global": np.zeros((len(strings), 2), np.float32), "tokens": np.zeros((len(strings), 4, 2)),
                "valid": np.zeros((len(strings), 4), bool)}

    return {"encode_image": encode_image, "encode_text": encode_text}


def test_writer_errors(tmp_path):
    images = np.zeros((2, 2, 2, 3), np.float32)
    with pytest.raises(ValueError, match="non-finite values after casting to float16"):
        write_feature_cache(tmp_path / "a", images, ["x"], **_fake_encoders(1e6))
    write_feature_cache(tmp_path / "a", images, ["x"], **_fake_encoders(1e6), dtype=np.float32, overwrite=True,
                        records=[{"image": 1, "pos": 0}])
    assert FeatureCache(tmp_path / "a").records() == [{"image": 1, "pos": 0}]
    write_feature_cache(tmp_path / "a", images, ["x"], **_fake_encoders(), overwrite=True)
    with pytest.raises(FileNotFoundError, match="without records"):  # the overwritten cache's records are gone
        FeatureCache(tmp_path / "a").records()
    with pytest.raises(FileExistsError):
        write_feature_cache(tmp_path / "a", images, ["x"], **_fake_encoders())
    with pytest.raises(ValueError, match=r"record 0: 'neg' = 1 outside \[-1, 1\)"):
        write_feature_cache(tmp_path / "b", images, ["x"], records=[{"image": 1, "pos": 0, "neg": 1}],
                            **_fake_encoders())


def test_reader_errors(tmp_path):
    images = np.zeros((2, 2, 2, 3), np.float32)
    with pytest.raises(FileNotFoundError, match="meta.json"):
        FeatureCache(tmp_path)
    write_feature_cache(tmp_path / "c", images, ["x"], **_fake_encoders())
    cache = FeatureCache(tmp_path / "c")
    with pytest.raises(FileNotFoundError, match="without records"):
        cache.records()
    np.save(tmp_path / "c" / "img_global.npy", np.zeros((3, 2), np.float16))
    with pytest.raises(ValueError, match=r"img_global.npy: shape \(3, 2\)"):
        FeatureCache(tmp_path / "c")
