"""Shared strictness helpers of `mmjax.data.readers._common` (each reader's own tests check that it uses them)."""

import json
import os

import pytest

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalRecord, DataFormatError


@pytest.mark.parametrize("rel", ["/etc/passwd", "../secret.jpg", "a/../../secret.jpg", "a/b/../../../x.jpg", "..",
                                 "//server/share/x.jpg", "C:/windows/x.jpg", "a\0b.jpg"])
def test_safe_join_refuses_paths_leaving_the_root(tmp_path, rel):
    with pytest.raises(DataFormatError, match=r"^rec 7: .*(absolute|outside|NUL)"):
        _common.safe_join(tmp_path, rel, "rec 7")
    # Without a root nothing is joined or opened: the path is only an identifier (NUL bytes are still refused).
    if "\0" in rel:
        with pytest.raises(DataFormatError, match=r"^rec 7: .*NUL"):
            _common.safe_join(None, rel, "rec 7")
    else:
        assert _common.safe_join(None, rel, "rec 7") == rel


@pytest.mark.parametrize("rel", ["x.jpg", "a/b/x.jpg", "a/../x.jpg", "./x.jpg", "a/./b/../x..jpg", "..x.jpg"])
def test_safe_join_keeps_paths_inside_the_root(tmp_path, rel):
    joined = _common.safe_join(tmp_path, rel, "rec")
    assert os.path.normpath(joined) == os.path.normpath(os.path.join(tmp_path, rel))
    # independent oracle: the normalised absolute path lies below the root
    assert os.path.commonpath([os.path.abspath(joined), str(tmp_path)]) == str(tmp_path)


def test_image_checker_refuses_escape_under_every_policy(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "outside.jpg").write_bytes(b"")  # exists: the escape must be refused, not merely "not found"
    for policy in ("error", "skip", "unchecked"):
        checker = _common.ImageChecker(tmp_path / "root", policy, "t")
        with pytest.raises(DataFormatError, match=r"f.json: \[3\]: image path '\.\./outside\.jpg' resolves outside"):
            checker.resolve("../outside.jpg", "f.json: [3]")


def test_load_json_refuses_duplicate_keys_with_file_key_and_line(tmp_path):
    p = tmp_path / "add_att.json"
    p.write_text('{\n "0": {"caption": "a"},\n "1": {"caption": "b"},\n "0": {"caption": "c"}\n}', encoding="utf-8")
    assert len(json.loads(p.read_text())) == 2  # what the plain loader silently does
    with pytest.raises(DataFormatError, match=r"add_att\.json:4: duplicate key '0'"):
        _common.load_json(p)
    # nested objects too; "a" is a key of every object, so no line is guessed (file and key only)
    p.write_text('[{"a": 1, "b": 2},\n {"a": 1, "a": 3}]', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"add_att\.json: duplicate key 'a'"):
        _common.load_json(p)
    p.write_text('[{"a": 1}, {"a": 2}]', encoding="utf-8")  # the same key in different objects is fine
    assert _common.load_json(p) == [{"a": 1}, {"a": 2}]


def test_iter_jsonl_refuses_duplicate_keys_naming_the_line(tmp_path):
    p = tmp_path / "examples.jsonl"
    p.write_text('{"id": 0}\n\n{"id": 1, "id": 2}\n', encoding="utf-8")
    it = _common.iter_jsonl(p)
    assert next(it) == (1, {"id": 0})
    with pytest.raises(DataFormatError, match=r"examples\.jsonl:3: duplicate key 'id'"):
        next(it)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_finite_number(value):
    with pytest.raises(DataFormatError, match=r"^f: \[2\]: field 'bbox_w' is (nan|inf|-inf), expected a finite"):
        _common.finite_number({"bbox_w": value}, "bbox_w", "f: [2]")
    with pytest.raises(DataFormatError, match="has type bool"):
        _common.finite_number({"bbox_w": True}, "bbox_w", "f: [2]")
    assert _common.finite_number({"bbox_w": 3}, "bbox_w", "f") == 3.0


def test_unique_ids_names_both_places():
    seen = _common.UniqueIds("image id")
    seen.add("7", "f:1")
    seen.add(7, "f:2")  # a different value (int vs str)
    with pytest.raises(DataFormatError, match=r"^f:3: duplicate image id '7' \(first at f:1\)"):
        seen.add("7", "f:3")
    where = "same location string"
    seen.add("x", where)
    with pytest.raises(DataFormatError, match="duplicate"):
        seen.add("x", where)  # repeated even when the caller passes the identical location object


def test_record_wrapper_names_the_location():
    with pytest.raises(DataFormatError, match=r"^f\.json: \[4\]: CompositionalRecord.*caption 1 is empty"):
        _common.record("f.json: [4]", CompositionalRecord, image="a", captions=("x", " "), correct=0, task="t")
    r = _common.record("f", CompositionalRecord, image="a", captions=("x",), correct=0, task="t")
    assert r.gold_caption == "x"
