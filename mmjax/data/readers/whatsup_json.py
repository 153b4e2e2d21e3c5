"""What's Up (amitakamath/whatsup_vlms ``dataset_zoo/aro_datasets.py``): COCO-Spatial and GQA-Spatial (``COCO_QA``,
``VG_QA``) and the Controlled-A / Controlled-B image sets (``Controlled_Images`` subsets 'A' and 'B').

* ``coco_qa_one_obj.json``, ``coco_qa_two_obj.json``, ``vg_qa_one_obj.json``, ``vg_qa_two_obj.json``: a list of
  ``[image_id, correct_caption, wrong_caption]``. Images, as in the official loader, under the What's Up root:
  ``image_root/val2017/{image_id:012d}.jpg`` (COCO) and ``image_root/vg_images/{image_id}.jpg`` (GQA/VG).
  Records: candidates ``(correct, wrong)``, gold 0, ``task`` ``'coco_spatial'`` or ``'gqa_spatial'``, ``subgroup``
  ``'one_obj'`` or ``'two_obj'`` (the reported number is the mean of the two subgroup accuracies).
* ``controlled_images_dataset.json`` (A, photographs in ``controlled_images/``) and ``controlled_clevr_dataset.json``
  (B, renders in ``controlled_clevr/``): a list of ``{"image_path": ..., "caption_options": [4 captions]}``, the
  first option correct. The official loader opens ``image_path`` relative to its checkout, whose ``data/`` directory
  is the What's Up root, so a leading ``data/`` component is dropped and the rest resolved under ``image_root``
  (paths without that prefix are taken relative to ``image_root`` as they are). Records: the four candidates in
  file order, gold 0, ``task`` ``'controlled_a'`` / ``'controlled_b'``, ``subgroup`` = the preposition the official
  evaluator reads from the file name (``{obj1}_{preposition}_{obj2}``: A ``left_of``, ``right_of``, ``on``,
  ``under``; B ``left_of``, ``right_of``, ``in-front_of``, ``behind``), ``meta['pair'] = (obj1, obj2)`` (the key
  of the official pair/set accuracies). A file name without a known preposition keeps ``subgroup=None`` and is
  counted in ``dataset.meta['no_preposition_in_name']`` (the official code would silently call it 'under'/'behind').
  An image listed twice is an error (the official pair/set scores are keyed by it).

Tie policy (official: ``np.argmax(scores) == 0``, ties to the correct caption) belongs to the metric.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError

_QA_NAME = re.compile(r"^(coco|vg)_qa_(one|two)_obj$")
_CONTROLLED = {"controlled_images_dataset": ("controlled_a", ("left_of", "right_of", "on", "under")),
               "controlled_clevr_dataset": ("controlled_b", ("left_of", "right_of", "in-front_of", "behind"))}
CONTROLLED_OPTIONS = 4
_OFFICIAL_PREFIX = "data"  # the official ARO_ROOT: image paths in the controlled JSONs start with it


def _image_relpath(source: str, image_id, where: str) -> str:
    if source == "coco":
        if isinstance(image_id, bool) or not (isinstance(image_id, int) or str(image_id).isdigit()):
            raise DataFormatError(f"{where}: COCO image id must be an integer, got {image_id!r}")
        return f"val2017/{int(image_id):012d}.jpg"
    if isinstance(image_id, bool) or not isinstance(image_id, (int, str)) or str(image_id) == "":
        raise DataFormatError(f"{where}: VG image id must be an integer or string, got {image_id!r}")
    return f"vg_images/{image_id}.jpg"


def _qa_records(p: Path, data, source: str, count: str, checker, skipped) -> list[CompositionalRecord]:
    task, subgroup = ("coco_spatial" if source == "coco" else "gqa_spatial"), f"{count}_obj"
    records = []
    for k, entry in enumerate(data):
        where = f"{p}: [{k}]"
        if not isinstance(entry, list) or len(entry) != 3:
            raise DataFormatError(f"{where}: expected [image_id, correct_caption, wrong_caption], got {entry!r:.100}")
        rel = _image_relpath(source, entry[0], where)
        captions = (_common.caption(entry[1], f"{where}[1]"), _common.caption(entry[2], f"{where}[2]"))
        image = checker.resolve(rel, where)
        if image is None:
            skipped["missing_image"] += 1
            continue
        records.append(_common.record(where, CompositionalRecord, image=image, captions=captions, correct=0,
                                      task=task, subgroup=subgroup, image_id=f"{source}:{entry[0]}",
                                      meta={"index": k}))
    return records


def _preposition(stem: str, known: tuple[str, ...]) -> tuple[str | None, tuple[str, str] | None]:
    """(preposition, (obj1, obj2)) from ``{obj1}_{preposition}_{obj2}`` (objects use '-' for spaces), or
    (None, None) when no known preposition separates two non-empty object names."""
    parts = stem.split("_")
    for prep in known:
        n = prep.count("_") + 1
        for i in range(1, len(parts) - n):
            if "_".join(parts[i:i + n]) == prep:
                return prep, ("_".join(parts[:i]), "_".join(parts[i + n:]))
    return None, None


def _controlled_records(p: Path, data, task: str, known, checker, skipped, unparsed) -> list[CompositionalRecord]:
    records, seen = [], _common.UniqueIds("image_path")
    for k, entry in enumerate(data):
        where = f"{p}: [{k}]"
        raw = _common.field(entry, "image_path", where)
        options = _common.field(entry, "caption_options", where, list)
        if len(options) != CONTROLLED_OPTIONS:
            raise DataFormatError(f"{where}: field 'caption_options' has {len(options)} captions, expected "
                                  f"{CONTROLLED_OPTIONS} (the correct one first)")
        captions = tuple(_common.caption(c, f"{where}.caption_options[{j}]") for j, c in enumerate(options))
        parts = PurePosixPath(raw).parts
        rel = str(PurePosixPath(*parts[1:])) if len(parts) > 1 and parts[0] == _OFFICIAL_PREFIX else raw
        seen.add(os.path.normpath(rel), where)
        prep, pair = _preposition(PurePosixPath(rel).stem, known)
        image = checker.resolve(rel, where)
        if image is None:
            skipped["missing_image"] += 1
            continue
        unparsed[0] += prep is None
        records.append(_common.record(where, CompositionalRecord, image=image, captions=captions, correct=0,
                                      task=task, subgroup=prep, image_id=rel,
                                      meta={"index": k, "preposition": prep, "pair": pair}))
    return records


def whatsup(path: str | os.PathLike | Sequence[str | os.PathLike], image_root: str | os.PathLike | None, *,
            missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read What's Up files: ``{coco|vg}_qa_{one|two}_obj.json``, ``controlled_images_dataset.json`` and / or
    ``controlled_clevr_dataset.json`` (see module docstring); image_root = the What's Up data root."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    checker = _common.ImageChecker(image_root, missing_images, "What's Up")
    skipped: collections.Counter = collections.Counter()
    records, total, sources, unparsed, controlled = [], 0, [], [0], False
    for p in paths:
        p = _common.require_file(p, "What's Up file")
        stem = Path(p).stem
        qa = _QA_NAME.match(stem)
        if not qa and stem not in _CONTROLLED:
            raise ValueError(f"{p}: expected a file named {{coco|vg}}_qa_{{one|two}}_obj.json, "
                             "controlled_images_dataset.json or controlled_clevr_dataset.json")
        data = _common.load_json(p)
        if not isinstance(data, list):
            raise DataFormatError(f"{p}: expected a JSON list, got {type(data).__name__}")
        sources.append(str(p))
        total += len(data)
        if qa:
            records += _qa_records(p, data, *qa.groups(), checker, skipped)
        else:
            task, known = _CONTROLLED[stem]
            controlled = True
            records += _controlled_records(p, data, task, known, checker, skipped, unparsed)
    if unparsed[0]:
        _common.log.warning("whatsup: %d controlled images have no known preposition in their file name "
                            "(subgroup None)", unparsed[0])
    return CompositionalDataset(records=records, name="whatsup", sources=tuple(sources),
                                skipped=_common.report_skipped("whatsup", skipped, total),
                                meta={"no_preposition_in_name": unparsed[0]} if controlled else {})
