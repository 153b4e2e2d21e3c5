"""What's Up COCO-Spatial and GQA-Spatial (amitakamath/whatsup_vlms ``dataset_zoo/aro_datasets.py``
``COCO_QA``, ``VG_QA``).

Files ``coco_qa_one_obj.json``, ``coco_qa_two_obj.json``, ``vg_qa_one_obj.json``, ``vg_qa_two_obj.json``: a list of
``[image_id, correct_caption, wrong_caption]``. Images, as in the official loader, under the What's Up root:
``image_root/val2017/{image_id:012d}.jpg`` (COCO) and ``image_root/vg_images/{image_id}.jpg`` (GQA/VG).
Records: candidates ``(correct, wrong)``, gold 0, ``task`` ``'coco_spatial'`` or ``'gqa_spatial'``, ``subgroup``
``'one_obj'`` or ``'two_obj'`` (the reported number is the mean of the two subgroup accuracies).
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Sequence
from pathlib import Path

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError

_NAME = re.compile(r"^(coco|vg)_qa_(one|two)_obj$")


def _image_relpath(source: str, image_id, where: str) -> str:
    if source == "coco":
        if isinstance(image_id, bool) or not (isinstance(image_id, int) or str(image_id).isdigit()):
            raise DataFormatError(f"{where}: COCO image id must be an integer, got {image_id!r}")
        return f"val2017/{int(image_id):012d}.jpg"
    if isinstance(image_id, bool) or not isinstance(image_id, (int, str)) or str(image_id) == "":
        raise DataFormatError(f"{where}: VG image id must be an integer or string, got {image_id!r}")
    return f"vg_images/{image_id}.jpg"


def whatsup(path: str | os.PathLike | Sequence[str | os.PathLike], image_root: str | os.PathLike | None, *,
            missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read one or several What's Up QA files (names must be ``{coco|vg}_qa_{one|two}_obj.json``)."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    checker = _common.ImageChecker(image_root, missing_images, "What's Up")
    skipped: collections.Counter = collections.Counter()
    records, total, sources = [], 0, []
    for p in paths:
        p = _common.require_file(p, "What's Up QA file")
        m = _NAME.match(Path(p).stem)
        if not m:
            raise ValueError(f"{p}: expected a file named {{coco|vg}}_qa_{{one|two}}_obj.json")
        source, count = m.groups()
        task, subgroup = ("coco_spatial" if source == "coco" else "gqa_spatial"), f"{count}_obj"
        data = _common.load_json(p)
        if not isinstance(data, list):
            raise DataFormatError(f"{p}: expected a JSON list, got {type(data).__name__}")
        sources.append(str(p))
        for k, entry in enumerate(data):
            total += 1
            where = f"{p}: [{k}]"
            if not isinstance(entry, list) or len(entry) != 3:
                raise DataFormatError(f"{where}: expected [image_id, correct_caption, wrong_caption], "
                                      f"got {entry!r:.100}")
            rel = _image_relpath(source, entry[0], where)
            captions = (_common.caption(entry[1], f"{where}[1]"), _common.caption(entry[2], f"{where}[2]"))
            image = checker.resolve(rel, where)
            if image is None:
                skipped["missing_image"] += 1
                continue
            records.append(CompositionalRecord(image=image, captions=captions, correct=0, task=task,
                                               subgroup=subgroup, image_id=f"{source}:{entry[0]}", meta={"index": k}))
    return CompositionalDataset(records=records, name="whatsup", sources=tuple(sources),
                                skipped=_common.report_skipped("whatsup", skipped, total))
