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
