import pickle

import numpy as np
import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError


def test_testall_whole_and_1k_style_folds(official):
    d, feats, caps = official.precomp(split="testall", n_images=10, per_image=5, ids=range(500, 510))
    ds = readers.precomp(d, split="testall")
    assert ds.num_images == 10 and ds.num_captions == 50 and ds.captions == tuple(caps)
    assert isinstance(ds.features, np.memmap) and not ds.features.flags.writeable
    np.testing.assert_array_equal(ds.features, feats)
    np.testing.assert_array_equal(ds.caption_to_image, np.repeat(np.arange(10), 5))
    assert ds.image_ids[0] == "500"
    fold = readers.precomp(d, split="testall", fold=3, num_folds=5)  # images 6,7 / captions 30..39
    assert fold.num_images == 2 and fold.captions == tuple(caps[30:40]) and fold.image_ids == ("506", "507")
    np.testing.assert_array_equal(fold.features, feats[6:8])
    np.testing.assert_array_equal(fold.caption_to_image, np.repeat([0, 1], 5))


def test_global_features_and_ids_per_caption(official):
    d, _, _ = official.precomp(split="test", n_images=4, per_image=2, ids=[7, 7, 8, 8, 9, 9, 10, 10])
    np.save(d / "test_ims.npy", np.zeros((4, 16), np.float16))
    ds = readers.precomp(d, split="test", feature_dim=16)
    assert ds.features.shape == (4, 16) and ds.image_ids == ("7", "8", "9", "10")
    with pytest.raises(DataFormatError, match=r"test_ims.npy.*last axis 2048"):
        readers.precomp(d, split="test", feature_dim=2048)


@pytest.mark.parametrize("array, message", [
    (np.zeros((4, 2, 3, 5), np.float32), r"shape \(4, 2, 3, 5\)"),
    (np.zeros((4,), np.float32), r"shape \(4,\)"),
    (np.zeros((4, 3, 5), np.int64), r"dtype int64"),
])
def test_wrong_shape_or_dtype(official, array, message):
    d, _, _ = official.precomp(n_images=4, per_image=5)
    np.save(d / "testall_ims.npy", array)
    with pytest.raises(DataFormatError, match=r"testall_ims\.npy.*" + message):
        readers.precomp(d)


def test_pickled_objects_refused(official):
    d, _, _ = official.precomp(n_images=2, per_image=1)
    # A hostile fixture written byte by byte as numpy would write an object array (.npy header with dtype '|O',
    # then a pickle payload); the reader must refuse it from the header, before anything is unpickled.
    with open(d / "testall_ims.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": (2,)})
        pickle.dump([{"a": 1}, [1, 2]], f, protocol=3)
    with pytest.raises(DataFormatError, match=r"testall_ims\.npy: holds pickled Python objects"):
        readers.precomp(d)


def test_captions_not_multiple_of_images(official):
    d, _, caps = official.precomp(n_images=4, per_image=5)
    (d / "testall_caps.txt").write_text("\n".join(caps[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"testall_caps\.txt: 19 captions is not a positive multiple of the 4"):
        readers.precomp(d)


def test_empty_caption_names_line(official):
    d, _, caps = official.precomp(n_images=2, per_image=2)
    (d / "testall_caps.txt").write_text("a\nb\n  \nd\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"testall_caps\.txt:3: empty caption"):
        readers.precomp(d)


def test_non_utf8_names_line(official):
    d, _, _ = official.precomp(n_images=2, per_image=2)
    (d / "testall_caps.txt").write_bytes(b"a\nb\ncaf\xe9\nd\n")
    with pytest.raises(DataFormatError, match=r"testall_caps\.txt:3: not valid UTF-8"):
        readers.precomp(d)


def test_missing_files(official, tmp_path):
    with pytest.raises(FileNotFoundError, match="directory not found"):
        readers.precomp(tmp_path / "nope")
    d, _, _ = official.precomp(split="testall")
    with pytest.raises(FileNotFoundError, match=r"dev_caps\.txt"):
        readers.precomp(d, split="dev")
    (d / "testall_ims.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"testall_ims\.npy"):
        readers.precomp(d)


def test_fold_out_of_range(official):
    d, _, _ = official.precomp(n_images=10)
    with pytest.raises(ValueError, match="fold=5"):
        readers.precomp(d, fold=5)


def test_not_a_npy_file(official):
    d, _, _ = official.precomp(n_images=2, per_image=1)
    (d / "testall_ims.npy").write_bytes(b"PK\x03\x04 this is a zip, not an array")
    with pytest.raises(DataFormatError, match=r"testall_ims\.npy: not a \.npy file"):
        readers.precomp(d)


def _first_bad_image(features):
    """Plain numpy reference: index of the first image holding a non-finite value, or None."""
    bad = np.flatnonzero(~np.isfinite(features.reshape(features.shape[0], -1)).all(axis=1))
    return int(bad[0]) if bad.size else None


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_non_finite_features_name_file_and_first_bad_image(official, bad_value, dtype):
    d, feats, _ = official.precomp(n_images=10, per_image=2, dtype=dtype)
    feats = feats.copy()
    feats[7, 2, 1] = bad_value
    feats[9, 0, 0] = np.nan  # a later bad row: the first one is reported
    np.save(d / "testall_ims.npy", feats)
    assert _first_bad_image(feats) == 7
    with pytest.raises(DataFormatError, match=r"testall_ims\.npy: non-finite feature value .* in image 7 "):
        readers.precomp(d)
    ds = readers.precomp(d, check_finite_values=False)  # opt-out for callers that clean features themselves
    assert np.isnan(ds.features[9, 0, 0])


@pytest.mark.parametrize("chunk_bytes", [1, 3 * 4 * 4, 10 ** 9])
@pytest.mark.parametrize("bad_row", [0, 4, 5, 10])
def test_finite_scan_chunk_boundaries(tmp_path, chunk_bytes, bad_row):
    feats = np.ones((11, 3, 4), np.float32)  # one image = 48 bytes; chunk_bytes 48 -> one image per chunk
    feats[bad_row, -1, -1] = np.inf
    np.save(tmp_path / "x.npy", feats)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    from mmjax.data.readers.scan_precomp import check_finite
    with pytest.raises(DataFormatError, match=rf"x\.npy: non-finite feature value inf in image {bad_row} \(row "
                                             rf"{bad_row} of 11, flat element 11 of 12\)"):
        check_finite(tmp_path / "x.npy", mm, chunk_bytes=chunk_bytes)
    assert _first_bad_image(feats) == bad_row


def test_duplicate_image_ids_name_file_and_id(official):
    d, _, _ = official.precomp(n_images=4, per_image=2, ids=[10, 11, 12, 11])
    with pytest.raises(DataFormatError, match=r"testall_ids\.txt:4 \(image 3\): duplicate image id '11' "
                                              r"\(first at .*testall_ids\.txt:2 \(image 1\)\)"):
        readers.precomp(d)
    # one id per caption: constant within an image's group, but two images share id 10
    d, _, _ = official.precomp(n_images=3, per_image=2, ids=[10, 10, 11, 11, 10, 10])
    with pytest.raises(DataFormatError, match=r"testall_ids\.txt:5 \(image 2\): duplicate image id '10'"):
        readers.precomp(d)
    d, _, _ = official.precomp(n_images=3, per_image=2, ids=[10, 10, 11, 11, 12, 12])
    assert readers.precomp(d).image_ids == ("10", "11", "12")


def test_check_same_feature_dim_train_vs_dev(official):
    d, _, _ = official.precomp(split="train", n_images=4, per_image=2, regions=3, dim=4)
    official.precomp(split="dev", n_images=2, per_image=2, regions=5, dim=4)  # other region count: fine
    train, dev = readers.precomp(d, split="train"), readers.precomp(d, split="dev")
    assert train.feature_dim == dev.feature_dim == 4
    assert readers.check_same_feature_dim([train, dev], ["train", "val"]) == 4
    official.precomp(split="dev", n_images=2, per_image=2, regions=3, dim=6)
    dev = readers.precomp(d, split="dev")
    with pytest.raises(DataFormatError, match=r"split 'dev' \(.*dev_ims\.npy\) has features \(2, 3, 6\) but split "
                                              r"'train' \(.*train_ims\.npy\) has \(4, 3, 4\)"):
        readers.check_same_feature_dim([train, dev])
    np.save(d / "dev_ims.npy", np.zeros((2, 4), np.float32))  # global vs region features: rank differs
    with pytest.raises(DataFormatError, match=r"split 'val' .* has features \(2, 4\)"):
        readers.check_same_feature_dim([train, readers.precomp(d, split="dev")], ["train", "val"])
    with pytest.raises(ValueError, match="2 datasets, 1 names"):
        readers.check_same_feature_dim([train, dev], ["train"])
