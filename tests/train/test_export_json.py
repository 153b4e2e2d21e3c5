"""A damaged `export.json` is reported naming the file (it used to surface as a bare JSONDecodeError)."""

import json

import pytest

from mmjax.train.export import load_exported


@pytest.mark.parametrize("content,match", [
    ('{"task": "retrieval", "config": {', r"not valid JSON"),     # truncated write
    ("", r"not valid JSON"),                                      # empty file
    (b"\xff\xfe{}", r"not valid JSON"),                           # not UTF-8
    ("[1, 2]", r"expected a JSON object"),                        # valid JSON, wrong shape
])
def test_broken_export_json_names_the_file(tmp_path, content, match):
    export = tmp_path / "export"
    export.mkdir()
    path = export / "export.json"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    with pytest.raises(ValueError, match=match) as err:
        load_exported(str(tmp_path))
    assert str(path) in str(err.value)
    assert not isinstance(err.value, json.JSONDecodeError)
