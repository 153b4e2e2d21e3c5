"""SugarCrepe (RAIVNLab/sugar-crepe ``main_eval.py``, ``data/*.json``).

Seven files ``{add_att, add_obj, replace_att, replace_obj, replace_rel, swap_att, swap_obj}.json``, each a dict
``id -> {filename, caption, negative_caption}``; images are COCO val2017 (image_root = the ``val2017`` directory,
as the official ``--coco_image_root``). One record per entry: candidates ``(caption, negative_caption)``, gold 0,
``task='sugarcrepe'``, ``subgroup`` = the subset name, ``meta['id']`` = the entry key. The official metric is
strict (pos > neg); that is the metric's business. A key repeated inside one file (plain ``json.load`` keeps only the
last entry, so one test case would vanish) is a `DataFormatError` naming the file and key.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from pathlib import Path

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError

SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def sugarcrepe(path: str | os.PathLike, image_root: str | os.PathLike | None, *,
               subsets: Sequence[str] | None = None,
               missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read SugarCrepe subsets.

    Args:
      path: the ``data`` directory holding ``{subset}.json`` (all of ``subsets`` must exist; default the 7 of
        `SUBSETS`), or one subset file (its stem names the subset).
      image_root: the COCO ``val2017`` directory.
      missing_images: ``'error'`` | ``'skip'`` (counted) | ``'unchecked'``.
    """
    p = Path(path)
    if p.is_dir():
        files = [(s, _common.require_file(p / f"{s}.json", f"SugarCrepe subset {s!r}")) for s in (subsets or SUBSETS)]
    else:
        p = _common.require_file(p, "SugarCrepe subset file")
        if subsets is not None and list(subsets) != [p.stem]:
            raise ValueError(f"{p}: a single file holds subset {p.stem!r}, not {list(subsets)}")
        files = [(p.stem, p)]
    checker = _common.ImageChecker(image_root, missing_images, "SugarCrepe")
    skipped: collections.Counter = collections.Counter()
    records, total = [], 0
    for subset, f in files:
        data = _common.load_json(f)
        if not isinstance(data, dict):
            raise DataFormatError(f"{f}: expected a JSON object id -> entry, got {type(data).__name__}")
        for key, entry in data.items():
            total += 1
            where = f"{f}: [{key!r}]"
            captions = (_common.caption(_common.field(entry, "caption", where), f"{where}.caption"),
                        _common.caption(_common.field(entry, "negative_caption", where), f"{where}.negative_caption"))
            rel = _common.field(entry, "filename", where)
            image = checker.resolve(rel, where)
            if image is None:
                skipped["missing_image"] += 1
                continue
            records.append(_common.record(where, CompositionalRecord, image=image, captions=captions, correct=0,
                                          task="sugarcrepe", subgroup=subset, image_id=rel, meta={"id": key}))
    return CompositionalDataset(records=records, name="sugarcrepe", sources=tuple(str(f) for _, f in files),
                                skipped=_common.report_skipped("sugarcrepe", skipped, total))
