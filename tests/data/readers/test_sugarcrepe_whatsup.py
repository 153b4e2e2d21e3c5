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


def test_sugarcrepe_duplicate_id_is_an_error_not_a_lost_entry(official):
    d, root = official.sugarcrepe(subsets=("swap_obj",))
    p = d / "swap_obj.json"
    # two entries under id "1": json.load would keep only the second, so one test case would vanish
    p.write_text('{"0": {"filename": "000000000000.jpg", "caption": "a", "negative_caption": "b"},\n'
                 ' "1": {"filename": "000000000001.jpg", "caption": "c", "negative_caption": "d"},\n'
                 ' "1": {"filename": "000000000000.jpg", "caption": "e", "negative_caption": "f"}}', encoding="utf-8")
    assert len(json.loads(p.read_text())) == 2
    with pytest.raises(DataFormatError, match=r"swap_obj\.json:3: duplicate key '1'"):
        readers.sugarcrepe(p, root)


@pytest.mark.parametrize("filename, message", [
    ("/etc/passwd", "absolute image path '/etc/passwd'"),
    ("../../../etc/passwd", r"image path '\.\./\.\./\.\./etc/passwd' resolves outside"),
])
def test_sugarcrepe_image_must_stay_under_root(official, filename, message):
    d, root = official.sugarcrepe(subsets=("add_obj",))
    p = d / "add_obj.json"
    p.write_text(json.dumps({"0": {"filename": filename, "caption": "a", "negative_caption": "b"}}))
    with pytest.raises(DataFormatError, match=r"add_obj\.json: \['0'\]: " + message):
        readers.sugarcrepe(p, root, missing_images="skip")


def test_whatsup_vg_id_cannot_leave_root(official):
    files, root = official.whatsup()
    p = files["vg_qa_one_obj"]
    p.write_text(json.dumps([[2370, "a", "b"], ["../../secret", "c", "d"]]))
    with pytest.raises(DataFormatError, match=r"vg_qa_one_obj\.json: \[1\]: image path 'vg_images/\.\./\.\./secret"
                                              r"\.jpg' resolves outside"):
        readers.whatsup(p, root, missing_images="unchecked")


@pytest.mark.parametrize("subset, task, preps", [
    ("A", "controlled_a", ("left_of", "right_of", "on", "under")),
    ("B", "controlled_b", ("left_of", "right_of", "in-front_of", "behind")),
])
def test_whatsup_controlled_four_options_correct_first(official, subset, task, preps):
    path, root = official.whatsup_controlled(subset)
    items = json.loads(path.read_text())
    ds = readers.whatsup(path, root)
    assert len(ds) == len(items) == 8 and {r.task for r in ds} == {task}
    for item, r in zip(items, ds):
        assert r.captions == tuple(item["caption_options"]) and len(r.captions) == 4 and r.correct == 0
        # official layout: "data/<folder>/<name>" under the checkout = "<folder>/<name>" under the What's Up root
        assert r.image == os.path.join(root, *item["image_path"].split("/")[1:]) and os.path.isfile(r.image)
        assert r.identity == item["image_path"][len("data/"):]
    assert [r.subgroup for r in ds] == list(preps) * 2
    assert ds[2].meta["pair"] == ("beer-bottle", "armchair") and ds[7].meta["pair"] == ("mug", "table")
    assert ds.meta == {"no_preposition_in_name": 0}
    # mixed with a QA file in one call, the QA records keep their own conventions
    files, _ = official.whatsup()
    both = readers.whatsup([files["coco_qa_one_obj"], path], root)
    assert [r.task for r in both] == ["coco_spatial"] + [task] * 8 and len(both[0].captions) == 2


def test_whatsup_controlled_bad_inputs(official):
    path, root = official.whatsup_controlled("A")
    items = json.loads(path.read_text())

    def write(new_items):
        path.write_text(json.dumps(new_items))

    write(items[:1] + [{**items[1], "caption_options": items[1]["caption_options"][:3]}])
    with pytest.raises(DataFormatError, match=r"controlled_images_dataset\.json: \[1\]: field 'caption_options' has "
                                              r"3 captions, expected 4"):
        readers.whatsup(path, root)
    write([{**items[0], "caption_options": ["a", " ", "c", "d"]}])
    with pytest.raises(DataFormatError, match=r"\[0\]\.caption_options\[1\]: empty caption"):
        readers.whatsup(path, root)
    write([items[0], {"caption_options": items[1]["caption_options"]}])
    with pytest.raises(DataFormatError, match=r"\[1\]: missing field 'image_path'"):
        readers.whatsup(path, root)
    write([items[0], items[1], items[0]])
    with pytest.raises(DataFormatError, match=r"\[2\]: duplicate image_path 'controlled_images/beer-bottle_left_of_"
                                              r"armchair\.jpeg' \(first at .*\[0\]\)"):
        readers.whatsup(path, root)
    write([{**items[0], "image_path": "data/../../etc/passwd"}])
    with pytest.raises(DataFormatError, match=r"\[0\]: image path '\.\./\.\./etc/passwd' resolves outside"):
        readers.whatsup(path, root, missing_images="skip")
    write([{**items[0], "image_path": "/etc/passwd"}])
    with pytest.raises(DataFormatError, match=r"\[0\]: absolute image path '/etc/passwd'"):
        readers.whatsup(path, root)
    os.remove(root / "controlled_images" / "mug_on_table.jpeg")
    write(items)
    with pytest.raises(FileNotFoundError, match=r"\[6\]: image not found"):
        readers.whatsup(path, root)
    assert readers.whatsup(path, root, missing_images="skip").skipped == {"missing_image": 1}
    # a file name without a known preposition: kept, counted, no invented subgroup
    (root / "controlled_images" / "odd.jpeg").write_bytes(b"")
    write([{**items[0], "image_path": "controlled_images/odd.jpeg"}])  # no "data/" prefix: relative to the root
    ds = readers.whatsup(path, root)
    assert ds[0].subgroup is None and ds[0].meta["pair"] is None and ds.meta == {"no_preposition_in_name": 1}
    assert ds[0].image == os.path.join(root, "controlled_images", "odd.jpeg")
