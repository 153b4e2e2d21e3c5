import os

import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError


def test_pandas_tsv_with_quoting(official):
    path, root = official.negclip()
    ds = readers.negclip_tsv(path, root)
    assert len(ds) == 3 and ds.skipped == {}
    r0, r1, r2 = ds
    assert r0.captions == ("A child holding a flowered umbrella.", "A umbrella holding a flowered child .",
                           "A flowered child holding a umbrella .")
    assert r0.correct == 0 and r0.task == "negclip" and r0.meta["neg_image"] == (2973, 1515)
    assert r0.image == os.path.join(root, "coco/val2014/COCO_val2014_000000184613.jpg")
    assert r0.image_id == "coco/val2014/COCO_val2014_000000184613.jpg"
    # pandas quotes a list whose items contain an apostrophe: "[""...""]"
    assert r1.captions[1] == "A white motorcycle filled with truck on it 's flatbed ." and r1.meta["row"] == 1
    assert r2.captions == ("A lone elephant.",) and r2.meta["num_negatives"] == 0
    assert ds.meta["rows_without_negative"] == 1


def test_wrong_field_count_names_line(official):
    path, root = official.negclip()
    lines = path.read_text().splitlines()
    lines[2] = lines[2].rsplit("\t", 1)[0]  # drop neg_image of data row 2 (file line 3)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"valid_neg_clip\.tsv:3: 4 fields, header has 5"):
        readers.negclip_tsv(path, root)


def test_bad_list_literal_and_header(official):
    path, root = official.negclip(rows=[("A cat.", "a.jpg", "['unclosed", "[1]")])
    with pytest.raises(DataFormatError, match=r"valid_neg_clip\.tsv:2 \(neg_caption\): not a Python list literal"):
        readers.negclip_tsv(path, root)
    path.write_text("\ttitle\timage\tneg_caption\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"valid_neg_clip\.tsv:1: .*lacks column\(s\) \['filepath'\]"):
        readers.negclip_tsv(path, root)


def test_missing_image(official):
    path, root = official.negclip()
    os.remove(root / "coco/val2014/COCO_val2014_000000458153.jpg")
    with pytest.raises(FileNotFoundError, match=r"valid_neg_clip\.tsv:4: image not found"):
        readers.negclip_tsv(path, root)
    assert readers.negclip_tsv(path, root, missing_images="skip").skipped == {"missing_image": 1}


def test_index_column_must_be_unique_non_negative_integers(official):
    path, root = official.negclip()
    lines = path.read_text().splitlines()
    bad = lines[:3] + ["x" + lines[3][1:]]  # file line 4: index 2 -> "x" (was silently replaced by row position)
    path.write_text("\n".join(bad) + "\n")
    with pytest.raises(DataFormatError, match=r"valid_neg_clip\.tsv:4: index column .* is 'x', expected a "
                                              "non-negative integer"):
        readers.negclip_tsv(path, root)
    dup = lines[:3] + ["1" + lines[3][1:]]  # index 1 twice: neg_image references would be ambiguous
    path.write_text("\n".join(dup) + "\n")
    with pytest.raises(DataFormatError, match=r"valid_neg_clip\.tsv:4: duplicate row index 1 \(first at "
                                              r".*valid_neg_clip\.tsv:3\)"):
        readers.negclip_tsv(path, root)


def test_negative_neg_image_and_escaping_filepath(official):
    path, root = official.negclip(rows=[("A cat.", "a.jpg", "['A tac.']", "[3, -1]")])
    with pytest.raises(DataFormatError, match=r"valid_neg_clip\.tsv:2 \(neg_image\): negative row index"):
        readers.negclip_tsv(path, root)
    path, root = official.negclip(rows=[("A cat.", "a.jpg", "['A tac.']", "[3]")])
    path.write_text(path.read_text().replace("\ta.jpg\t", "\t/etc/passwd\t"))
    with pytest.raises(DataFormatError, match=r"valid_neg_clip\.tsv:2: absolute image path '/etc/passwd'"):
        readers.negclip_tsv(path, root, missing_images="skip")
