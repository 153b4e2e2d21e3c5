import os

import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError


def test_pairs_matched_to_coco_with_counts(official):
    path, root, anns = official.abc6k()
    ds = readers.abc6k(path, root, coco_captions=anns)
    assert len(ds) == 2
    assert dict(ds.skipped) == {"identical_after_normalisation": 1, "no_coco_match": 1}
    cat, kitchen = ds
    assert cat.captions == ("A black cat is inside a white toilet.", "A white cat is inside a black toilet .")
    assert cat.correct == 0 and cat.task == "abc6k" and cat.image_id == "9" and not cat.meta["ambiguous_image"]
    assert cat.image == os.path.join(root, "train2014", "COCO_train2014_000000000009.jpg")
    # two COCO images carry this caption (modulo punctuation): lowest id, flagged
    assert kitchen.image_id == "12" and kitchen.meta["ambiguous_image"]
    assert kitchen.meta["candidate_image_ids"] == (12, 30) and kitchen.meta["line"] == 3
    assert kitchen.image == os.path.join(root, "val2014", "COCO_val2014_000000000012.jpg")
    assert ds.meta == {"pairs": 4, "ambiguous_image": 1}


def test_odd_line_count_and_empty_line(official):
    path, root, anns = official.abc6k(lines=["A black cat is inside a white toilet.",
                                             "A white cat is inside a black toilet .", "A dangling line."])
    with pytest.raises(DataFormatError, match=r"ABC-6K\.txt:3: odd number of lines"):
        readers.abc6k(path, root, coco_captions=anns)
    path.write_text("A black cat is inside a white toilet.\n\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"ABC-6K\.txt:2: empty caption"):
        readers.abc6k(path, root, coco_captions=anns)


def test_missing_annotation_or_image(official):
    path, root, anns = official.abc6k()
    with pytest.raises(FileNotFoundError, match="captions_val2014_x"):
        readers.abc6k(path, root, coco_captions=[anns[0], anns[1].with_name("captions_val2014_x.json")])
    os.remove(root / "train2014" / "COCO_train2014_000000000009.jpg")
    with pytest.raises(FileNotFoundError, match=r"ABC-6K\.txt:1: image not found"):
        readers.abc6k(path, root, coco_captions=anns)
    assert readers.abc6k(path, root, coco_captions=anns, missing_images="skip").skipped["missing_image"] == 1


def test_coco_image_id_listed_twice_is_an_error(official):
    import json
    path, root, anns = official.abc6k()
    val = json.loads(anns[1].read_text())
    val["images"].append({"id": 9, "file_name": "COCO_val2014_000000000009.jpg"})  # train's id 9 again
    anns[1].write_text(json.dumps(val))
    with pytest.raises(DataFormatError, match=r"captions_val2014\.json: images\[1\]: duplicate COCO image id 9 "
                                              r"\(first at .*captions_train2014\.json: images\[0\]\)"):
        readers.abc6k(path, root, coco_captions=anns)


def test_coco_file_name_cannot_leave_root(official):
    import json
    path, root, anns = official.abc6k()
    train = json.loads(anns[0].read_text())
    train["images"][0]["file_name"] = "../../etc/passwd"
    anns[0].write_text(json.dumps(train))
    with pytest.raises(DataFormatError, match=r"ABC-6K\.txt:1: image path '\.\./\.\./etc/passwd' resolves outside"):
        readers.abc6k(path, root, coco_captions=anns, missing_images="skip")
