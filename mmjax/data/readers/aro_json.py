"""ARO (mertyg/vision-language-models-are-bows ``dataset_zoo/aro_datasets.py``): VG-Relation, VG-Attribution,
COCO-Order, Flickr30k-Order.

* ``visual_genome_relation.json``: a list of ``{image_path, bbox_x, bbox_y, bbox_w, bbox_h, true_caption,
  false_caption, relation_name, ...}``. Image = ``image_root / image_path`` (image_root = the unzipped ``images``
  directory of ``vgr_vga_images.zip``), cropped to the bbox. Candidates ``(false_caption, true_caption)``, gold 1.
  ``subgroup = meta['relation'] = relation_name``: the metric macro-averages over it, excluding the notebook's
  157 "symmetric" relations (`eval.aro.vgr_exclude`); the reader keeps every record.
* ``visual_genome_attribution.json``: same fields with ``attributes: [a1, a2]`` instead of ``relation_name``;
  ``subgroup = "a1_a2"`` (ARO's group key), ``meta['attributes'] = (a1, a2)``; the metric keeps groups with
  >= 25 records (`eval.aro.vga_min_count`).
* COCO-Order / Flickr30k-Order: BLIP's ``coco_karpathy_test.json`` / ``flickr30k_test.json`` (a list of
  ``{image, caption: [...]}``; image relative to image_root) or a Karpathy ``dataset_*.json`` (its ``test`` split).
  One record per caption: ``[pre_caption(c, 30)] + 4 perturbations`` (`aro_order`), gold 0.

Tie policies (VG: argmax, tie -> index 0 = wrong; Order: tie -> correct) belong to the metric.
The image identity of VG records is the JSON ``image_id`` when present, else ``image_path``.
Every bad field (non-finite or degenerate bbox, non-integer/-string ``image_id``, image path leaving image_root,
repeated image in an order annotation list) is a `DataFormatError` naming the file and record.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

from mmjax.data.readers import _common
from mmjax.data.readers.aro_order import OrderPerturber
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError

TASKS = ("vg_relation", "vg_attribution", "coco_order", "flickr30k_order")


def _infer_task(path: Path) -> str:
    name = path.name.lower()
    for key, task in (("relation", "vg_relation"), ("attribution", "vg_attribution"), ("coco", "coco_order"),
                      ("flickr", "flickr30k_order")):
        if key in name:
            return task
    raise ValueError(f"{path}: cannot tell the ARO task from the file name; pass task= one of {TASKS}")


def _vg_records(path: Path, data: Any, task: str, checker: _common.ImageChecker, skipped) -> list:
    if not isinstance(data, list):
        raise DataFormatError(f"{path}: expected a JSON list of test cases, got {type(data).__name__}")
    records = []
    for k, item in enumerate(data):
        where = f"{path}: [{k}]"
        rel = _common.field(item, "image_path", where)
        bbox = tuple(_common.finite_number(item, key, where) for key in ("bbox_x", "bbox_y", "bbox_w", "bbox_h"))
        if bbox[2] <= 0 or bbox[3] <= 0:
            raise DataFormatError(f"{where}: degenerate bbox (x, y, w, h) = {bbox}")
        captions = (_common.caption(_common.field(item, "false_caption", where), f"{where}.false_caption"),
                    _common.caption(_common.field(item, "true_caption", where), f"{where}.true_caption"))
        if task == "vg_relation":
            relation = _common.field(item, "relation_name", where)
            subgroup, meta = relation, {"relation": relation}
        else:
            attrs = _common.field(item, "attributes", where, list)
            if len(attrs) != 2 or not all(isinstance(a, str) for a in attrs):
                raise DataFormatError(f"{where}: field 'attributes' must be two strings, got {attrs!r}")
            subgroup, meta = f"{attrs[0]}_{attrs[1]}", {"attributes": tuple(attrs)}
        image = checker.resolve(rel, where)
        if image is None:
            skipped["missing_image"] += 1
            continue
        image_id = (str(_common.field(item, "image_id", where, (int, str))) if item.get("image_id") is not None
                    else rel)
        records.append(_common.record(where, CompositionalRecord, image=image, captions=captions, correct=1,
                                      task=task, subgroup=subgroup, bbox=bbox, image_id=image_id,
                                      meta={**meta, "index": k}))
    return records


def _order_annotations(path: Path, data: Any) -> list[tuple[str, list, str]]:
    """(relative image path, captions, location) per image, from BLIP's list or a Karpathy test split.

    Each image is listed once in both formats; a repeat would count its captions twice, so it is an error."""
    seen = _common.UniqueIds("image")
    out = []
    if isinstance(data, list):
        for k, ann in enumerate(data):
            where = f"{path}: [{k}]"
            rel = _common.field(ann, "image", where)
            seen.add(os.path.normpath(rel), where)
            out.append((rel, _common.field(ann, "caption", where, list), where))
        return out
    images = _common.field(data, "images", str(path), list)
    for k, item in enumerate(images):
        where = f"{path}: images[{k}]"
        if _common.field(item, "split", where) != "test":
            continue
        filename = _common.field(item, "filename", where)
        rel = str(Path(_common.field(item, "filepath", where)) / filename) if "filepath" in item else filename
        seen.add(os.path.normpath(rel), where)
        sents = [_common.field(s, "raw", f"{where}.sentences[{j}]")
                 for j, s in enumerate(_common.field(item, "sentences", where, list))]
        out.append((rel, sents, where))
    return out


def _order_records(path: Path, data: Any, task: str, checker, skipped, perturber, max_words: int) -> list:
    records = []
    for rel, caps, where in _order_annotations(path, data):
        image = checker.resolve(rel, where)
        if image is None:
            skipped["missing_image"] += len(caps)
            continue
        for i, cap in enumerate(caps):
            cap = _common.caption(cap, f"{where}.caption[{i}]")
            perturbed = perturber(cap)
            if len(perturbed) != 4:
                raise ValueError(f"perturber returned {len(perturbed)} captions, expected 4")
            options = tuple(_common.pre_caption(c, max_words) for c in (cap, *perturbed))
            records.append(_common.record(f"{where}.caption[{i}]", CompositionalRecord, image=image,
                                          captions=options, correct=0, task=task, image_id=rel,
                                          meta={"caption_index": i}))
    return records


def aro(path: str | os.PathLike, image_root: str | os.PathLike | None, *, task: str | None = None,
        perturber: OrderPerturber | None = None, seed: int = 1, max_words: int = 30,
        missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read one ARO task file (see module docstring).

    Args:
      path: the task's JSON file.
      image_root: directory the file's image paths are relative to.
      task: one of `TASKS`; inferred from the file name when None.
      perturber: order tasks only: a callable caption -> 4 perturbed captions; default
        ``OrderPerturber(seed)`` (needs spaCy + nltk).
      seed: seed of the default perturber (ARO: 1).
      max_words: ``pre_caption`` truncation for order tasks (ARO: 30).
      missing_images: ``'error'`` | ``'skip'`` (counted) | ``'unchecked'``.
    """
    path = _common.require_file(path, "ARO annotation file")
    task = task or _infer_task(path)
    if task not in TASKS:
        raise ValueError(f"unknown ARO task {task!r}; expected one of {TASKS}")
    data = _common.load_json(path)
    checker = _common.ImageChecker(image_root, missing_images, str(path))
    skipped: collections.Counter = collections.Counter()
    if task.startswith("vg_"):
        records = _vg_records(path, data, task, checker, skipped)
    else:
        perturber = perturber if perturber is not None else OrderPerturber(seed=seed)
        records = _order_records(path, data, task, checker, skipped, perturber, max_words)
    name = f"aro:{task}"
    return CompositionalDataset(records=records, name=name, sources=(str(path),),
                                skipped=_common.report_skipped(name, skipped, len(records) + sum(skipped.values())))
