import os

import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError


def test_clevr_rows_object_attribute_order(official):
    path, root = official.clevr()
    ds = readers.clevr_pug(path, root)
    assert dict(ds.skipped) == {"identical_attributes": 1, "identical_objects": 1}
    r0, r1 = ds
    assert r0.captions == ("red cube and blue sphere", "blue cube and red sphere") and r0.correct == 0
    assert r0.task == "clevr" and r0.meta["attributes"] == ("red", "blue") and r0.meta["objects"] == ("cube", "sphere")
    assert r0.image == os.path.join(root, "CLEVR_0.png") and r1.meta["line"] == 4


def test_clevr_header_row_and_bad_rows(official):
    path, root = official.clevr(rows=["filename,obj1,attr1,obj2,attr2", "CLEVR_0.png,cube,red,sphere,blue"])
    assert len(readers.clevr_pug(path, root)) == 1
    path, root = official.clevr(rows=["CLEVR_0.png,cube,red,sphere,blue", "CLEVR_1.png,cube,red,sphere,blue,cone,x"])
    with pytest.raises(DataFormatError, match=r"output_2obj\.csv:2: 7 fields"):
        readers.clevr_pug(path, root)
    path.write_text('CLEVR_0.png,cube,red,sphere,blue\nCLEVR_1.png,"cube,red,sphere,blue\n')
    with pytest.raises(DataFormatError, match=r"output_2obj\.csv:2: malformed CSV"):
        readers.clevr_pug(path, root)


def test_pug_spare(official):
    path, root = official.pug()
    ds = readers.clevr_pug(path, root)
    assert [r.captions for r in ds] == [("Red Elephant and Blue Bear", "Blue Elephant and Red Bear"),
                                        ("Grass Goldfish and Stone Bunny", "Stone Goldfish and Grass Bunny")]
    assert ds[1].image == os.path.join(root, "Island", "img_1.png") and ds[1].meta["world"] == "Island"
    assert {r.task for r in ds} == {"pug"}


def test_pug_bad_row_and_missing_image(official):
    path, root = official.pug(extra_row="img_2.png,Desert,Elephant,Bear,Red")
    with pytest.raises(DataFormatError, match=r"PUG_SPARE\.csv:4: 5 fields, header has 7"):
        readers.clevr_pug(path, root)
    path, root = official.pug()
    os.remove(root / "Desert" / "img_0.png")
    with pytest.raises(FileNotFoundError, match=r"PUG_SPARE\.csv:2: image not found"):
        readers.clevr_pug(path, root)
    assert readers.clevr_pug(path, root, missing_images="skip").skipped == {"missing_image": 1}


def test_winoground_grouped_records(official):
    path, root = official.winoground(n=2)
    ds = readers.winoground(path, root)
    assert len(ds) == 4
    pairs = readers.winoground_pairs(ds)
    a, b = pairs[1]
    assert a.captions == b.captions == ("an old person kisses a young person 1",
                                        "a young person kisses an old person 1")
    assert (a.correct, b.correct) == (0, 1) and a.image == os.path.join(root, "ex_1_img_0.png")
    assert a.subgroup == "Object" and a.meta["example_id"] == 1 and b.image_id == "ex_1_img_1"
    with pytest.raises(ValueError, match="not an"):
        readers.winoground_pairs([ds[0], ds[3]])


def test_winoground_bad_inputs(official):
    path, root = official.winoground(n=2)
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:-5] + "\n")
    with pytest.raises(DataFormatError, match=r"examples\.jsonl:2: malformed JSON line"):
        readers.winoground(path, root)
    path.write_text("\n".join(lines) + "\n")
    os.remove(root / "ex_0_img_1.png")
    with pytest.raises(FileNotFoundError, match=r"examples\.jsonl:1 image_1: image not found"):
        readers.winoground(path, root)
    ds = readers.winoground(path, root, missing_images="skip")
    assert len(ds) == 2 and ds.skipped == {"missing_image": 2}


def test_winoground_duplicate_key_and_escaping_image(official):
    path, root = official.winoground(n=2)
    lines = path.read_text().splitlines()
    # a repeated "caption_0" key: json.loads would silently keep the second caption
    lines[1] = lines[1].replace('"caption_1":', '"caption_0": "x", "caption_1":')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"examples\.jsonl:2: duplicate key 'caption_0'"):
        readers.winoground(path, root)
    lines = official.winoground(n=2)[0].read_text().splitlines()
    lines[0] = lines[0].replace('"image_1": "ex_0_img_1"', '"image_1": "../../ex_0_img_1"')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"examples\.jsonl:1 image_1: image path '\.\./\.\./ex_0_img_1\.png' "
                                              "resolves outside"):
        readers.winoground(path, root, missing_images="skip")
    lines[0] = lines[0].replace('"id": 0', '"id": 1').replace("../../", "")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"examples\.jsonl:2: duplicate example id 1 \(first at .*:1\)"):
        readers.winoground(path, root)


def test_binding_csv_paths_cannot_leave_root(official):
    path, root = official.clevr(rows=["CLEVR_0.png,cube,red,sphere,blue", "/etc/passwd,cube,red,sphere,blue"])
    with pytest.raises(DataFormatError, match=r"output_2obj\.csv:2: absolute image path '/etc/passwd'"):
        readers.clevr_pug(path, root, missing_images="skip")
    path, root = official.pug(extra_row="img_9.png,..,Elephant,Bear,Red,Blue,0")
    with pytest.raises(DataFormatError, match=r"PUG_SPARE\.csv:4: image path '\.\./img_9\.png' resolves outside"):
        readers.clevr_pug(path, root, missing_images="skip")
