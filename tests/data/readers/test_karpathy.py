import os

import numpy as np
import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError


def test_coco_test_split_first_five_captions(official):
    path, root = official.karpathy_coco()
    ds = readers.karpathy(path, root, split="test")
    assert ds.num_images == 2 and ds.num_captions == 10
    assert ds.image_ids == ("100", "101")
    assert ds.images[0] == os.path.join(root, "val2014", "COCO_val2014_000000000100.jpg")
    assert ds.captions[0] == "Image 0 sentence 0." and ds.captions[5] == "Image 1 sentence 0."
    np.testing.assert_array_equal(ds.caption_to_image, np.repeat([0, 1], 5))
    assert ds.skipped == {"captions_beyond_limit": 1}  # image 0 has 6 sentences


def test_train_includes_restval(official):
    path, root = official.karpathy_coco()
    assert readers.karpathy(path, root, split="train").image_ids == ("103", "104")
    assert readers.karpathy(path, root, split="train", include_restval=False).image_ids == ("103",)
    assert readers.karpathy(path, root, split="test", captions_per_image=None).num_captions == 11


def test_flickr_without_filepath(official):
    path, root = official.karpathy_flickr()
    ds = readers.karpathy(path, root, split="test")
    assert ds.image_ids == ("1000", "1001", "1002") and ds.images[2] == os.path.join(root, "1002.jpg")


def test_missing_image_error_and_counted_skip(official):
    path, root = official.karpathy_coco()
    os.remove(root / "val2014" / "COCO_val2014_000000000101.jpg")
    with pytest.raises(FileNotFoundError, match=r"images\[1\].*COCO_val2014_000000000101\.jpg"):
        readers.karpathy(path, root, split="test")
    ds = readers.karpathy(path, root, split="test", missing_images="skip")
    assert ds.image_ids == ("100",) and ds.skipped["missing_image"] == 1


def test_too_few_sentences_and_malformed_json(official):
    path, root = official.karpathy_coco(sentences=4, extra_first=0)
    with pytest.raises(DataFormatError, match=r"images\[0\].*4 sentences"):
        readers.karpathy(path, root)
    path.write_text('{"images": [\n  {"split": "test",\n  oops}\n]}', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"dataset_coco\.json:3: malformed JSON"):
        readers.karpathy(path, root)


def test_empty_caption_names_field(official):
    import json
    path, root = official.karpathy_coco()
    data = json.loads(path.read_text())
    data["images"][1]["sentences"][2]["raw"] = "   "
    path.write_text(json.dumps(data))
    with pytest.raises(DataFormatError, match=r"images\[1\]\.sentences\[2\]: empty caption"):
        readers.karpathy(path, root)


def _rewrite(path, edit):
    import json
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_duplicate_cocoid_anywhere_in_the_file(official):
    path, root = official.karpathy_coco()
    # image 4 (restval) reuses test image 0's cocoid: reading the test split must still refuse the file
    _rewrite(path, lambda d: d["images"][4].update(cocoid=100))
    with pytest.raises(DataFormatError, match=r"dataset_coco\.json: images\[4\]: duplicate cocoid 100 "
                                              r"\(first at .*images\[0\]\)"):
        readers.karpathy(path, root, split="test")


def test_duplicate_imgid_and_bad_id_type(official):
    path, root = official.karpathy_flickr()
    _rewrite(path, lambda d: d["images"][2].update(imgid=0))
    with pytest.raises(DataFormatError, match=r"dataset_flickr30k\.json: images\[2\]: duplicate imgid 0"):
        readers.karpathy(path, root)
    path, root = official.karpathy_coco()
    _rewrite(path, lambda d: d["images"][1].update(cocoid="101"))
    with pytest.raises(DataFormatError, match=r"images\[1\]: field 'cocoid' has type str, expected int"):
        readers.karpathy(path, root)


def test_same_image_listed_twice_in_a_split(official):
    path, root = official.karpathy_flickr()  # no cocoid: the file stem is the id

    def dup(d):
        d["images"][2].update(filename="1000.jpg", imgid=7)
    _rewrite(path, dup)
    with pytest.raises(DataFormatError, match=r"images\[2\]: duplicate image id '1000' \(first at .*images\[0\]\)"):
        readers.karpathy(path, root)


@pytest.mark.parametrize("field, value, message", [
    ("filename", "/etc/passwd", "absolute image path '/etc/passwd'"),
    ("filepath", "/etc", r"absolute image path '/etc/COCO_val2014_000000000101\.jpg'"),
    ("filepath", "../../..", r"image path '\.\./\.\./\.\./COCO_val2014_000000000101\.jpg' resolves outside"),
    ("filename", "../../secret.jpg", r"image path 'val2014/\.\./\.\./secret\.jpg' resolves outside"),
])
def test_image_path_must_stay_under_root(official, field, value, message):
    path, root = official.karpathy_coco()
    _rewrite(path, lambda d: d["images"][1].update({field: value}))
    for policy in ("error", "skip", "unchecked"):
        with pytest.raises(DataFormatError, match=r"dataset_coco\.json: images\[1\]: " + message):
            readers.karpathy(path, root, missing_images=policy)
