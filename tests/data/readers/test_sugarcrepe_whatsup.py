import json
import os

import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError
from mmjax.data.readers.sugarcrepe_json import SUBSETS


def test_sugarcrepe_seven_subsets(official):
    d, root = official.sugarcrepe()
    ds = readers.sugarcrepe(d, root)
    assert len(ds) == 14 and {r.subgroup for r in ds} == set(SUBSETS) and {r.task for r in ds} == {"sugarcrepe"}
    r = next(r for r in ds if r.subgroup == "swap_obj" and r.meta["id"] == "1")
    assert r.captions == ("swap_obj positive 1", "swap_obj negative 1") and r.correct == 0
    assert r.image == os.path.join(root, "000000000001.jpg") and r.image_id == "000000000001.jpg"
    single = readers.sugarcrepe(d / "replace_rel.json", root)
    assert len(single) == 2 and {r.subgroup for r in single} == {"replace_rel"}


def test_sugarcrepe_bad_inputs(official):
    d, root = official.sugarcrepe()
    (d / "swap_att.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"swap_att\.json"):
        readers.sugarcrepe(d, root)
    assert len(readers.sugarcrepe(d, root, subsets=["add_att"])) == 2
    (d / "add_att.json").write_text(json.dumps({"0": {"filename": "000000000000.jpg", "caption": "x"}}))
    with pytest.raises(DataFormatError, match=r"add_att\.json: \['0'\]: missing field 'negative_caption'"):
        readers.sugarcrepe(d, root, subsets=["add_att"])
    (d / "add_att.json").write_bytes(b'{"0": {"filename": "a.jpg",\n "caption": "\xff"}}')
    with pytest.raises(DataFormatError, match=r"add_att\.json:2: not valid UTF-8"):
        readers.sugarcrepe(d, root, subsets=["add_att"])


def test_whatsup_all_four_files(official):
    files, root = official.whatsup()
    ds = readers.whatsup(list(files.values()), root)
    assert [(r.task, r.subgroup) for r in ds] == [
        ("coco_spatial", "one_obj"), ("coco_spatial", "two_obj"), ("coco_spatial", "two_obj"),
        ("gqa_spatial", "one_obj"), ("gqa_spatial", "two_obj")]
    assert ds[0].captions == ("A dog on the left", "A dog on the right") and ds[0].correct == 0
    assert ds[0].image == os.path.join(root, "val2017", "000000000139.jpg")
    assert ds[3].image == os.path.join(root, "vg_images", "2370.jpg")
    assert ds[0].identity == ds[2].identity == "coco:139"  # same COCO image in one- and two-object files


def test_whatsup_bad_inputs(official):
    files, root = official.whatsup()
    p = files["coco_qa_two_obj"]
    p.write_text(json.dumps([[632, "A cup above a plate", "A cup below a plate"], [139, "only two"]]))
    with pytest.raises(DataFormatError, match=r"coco_qa_two_obj\.json: \[1\]: expected \[image_id"):
        readers.whatsup(p, root)
    p.write_text(json.dumps([[632, "A cup above a plate", ""]]))
    with pytest.raises(DataFormatError, match=r"coco_qa_two_obj\.json: \[0\]\[2\]: empty caption"):
        readers.whatsup(p, root)
    p.write_text(json.dumps([[999, "a", "b"]]))
    with pytest.raises(FileNotFoundError, match=r"000000000999\.jpg"):
        readers.whatsup(p, root)
    assert readers.whatsup(p, root, missing_images="skip").skipped == {"missing_image": 1}
    p.write_text('[[632, "a", "b"],\n [139 "a", "b"]]')
    with pytest.raises(DataFormatError, match=r"coco_qa_two_obj\.json:2: malformed JSON"):
        readers.whatsup(p, root)
    other = p.with_name("spatial.json")
    other.write_text("[]")
    with pytest.raises(ValueError, match="expected a file named"):
        readers.whatsup(other, root)
