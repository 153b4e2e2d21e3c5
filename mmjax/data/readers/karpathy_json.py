"""Karpathy split files ``dataset_coco.json`` / ``dataset_flickr30k.json`` with an image root.

Format (Karpathy's NeuralTalk release): ``{"dataset": ..., "images": [{"split": "train"|"restval"|"val"|"test",
"filename": ..., "filepath": "val2014" (COCO only), "cocoid" (COCO) | "imgid", "sentences": [{"raw": ...,
"tokens": [...], ...}, ...]}, ...]}``. Image path = ``image_root / filepath / filename`` (COCO: image_root is the
directory holding ``train2014/`` and ``val2014/``), or ``image_root / filename`` when ``filepath`` is absent
(Flickr30k: the ``flickr30k-images`` directory).

Conventions [default, `eval.retrieval.captions_per_image` = 5]: the first ``captions_per_image`` sentences (``raw``
text, stripped) of every image are kept, in file order; the extra COCO captions (some images have 6-7) are counted
in ``skipped['captions_beyond_limit']``. An image with fewer captions is an error. ``split='train'`` includes
``restval`` (Karpathy train = 113 287 COCO images) unless ``include_restval=False``.

Ids: ``cocoid`` (COCO, an integer) or the file stem (Flickr30k) is the image id. Repeated ``cocoid`` or ``imgid``
values anywhere in the file (a duplicate across splits would leak a test image into training), and repeated image
ids or image paths within the split, are `DataFormatError`s naming both records.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np

from mmjax.data.readers import _common
from mmjax.data.records import DataFormatError, RetrievalDataset


def karpathy(json_path: str | os.PathLike, image_root: str | os.PathLike | None, *, split: str = "test",
             captions_per_image: int | None = 5, include_restval: bool = True,
             missing_images: _common.MissingImages = "error") -> RetrievalDataset:
    """Images and captions of one Karpathy split.

    Args:
      json_path: ``dataset_coco.json`` or ``dataset_flickr30k.json``.
      image_root: see module docstring.
      split: ``'train'``, ``'val'``, ``'test'`` or ``'restval'``.
      captions_per_image: keep the first k sentences of each image (None keeps all; the retrieval metrics assume
        a constant k).
      include_restval: with ``split='train'``, also take the ``restval`` images.
      missing_images: ``'error'`` | ``'skip'`` (counted) | ``'unchecked'``.
    """
    path = _common.require_file(json_path, "Karpathy split JSON")
    data = _common.load_json(path)
    images = _common.field(data, "images", f"{path}", list)
    wanted = {split} | ({"restval"} if split == "train" and include_restval else set())
    checker = _common.ImageChecker(image_root, missing_images, f"{path}")
    skipped: collections.Counter = collections.Counter()
    paths, ids, captions, owner = [], [], [], []
    n_in_split = 0
    file_ids = {key: _common.UniqueIds(key) for key in ("cocoid", "imgid")}
    split_ids, split_paths = _common.UniqueIds("image id"), _common.UniqueIds("image path")
    for k, item in enumerate(images):
        where = f"{path}: images[{k}]"
        for key, seen in file_ids.items():  # over the whole file, whatever the split
            if isinstance(item, dict) and key in item:
                seen.add(_common.field(item, key, where, int), where)
        if _common.field(item, "split", where) not in wanted:
            continue
        n_in_split += 1
        filename = _common.field(item, "filename", where)
        rel = (str(Path(_common.field(item, "filepath", where)) / filename) if "filepath" in item else filename)
        image_id = str(item["cocoid"]) if "cocoid" in item else Path(filename).stem
        split_ids.add(image_id, where)
        split_paths.add(os.path.normpath(rel), where)
        sentences = _common.field(item, "sentences", where, list)
        if captions_per_image is not None and len(sentences) < captions_per_image:
            raise DataFormatError(f"{where} ({filename}): {len(sentences)} sentences, fewer than "
                                  f"captions_per_image={captions_per_image}")
        image_path = checker.resolve(rel, where)
        if image_path is None:
            skipped["missing_image"] += 1
            continue
        keep = sentences if captions_per_image is None else sentences[:captions_per_image]
        skipped["captions_beyond_limit"] += len(sentences) - len(keep)
        image_index = len(paths)
        for s, sent in enumerate(keep):
            captions.append(_common.caption(_common.field(sent, "raw", f"{where}.sentences[{s}]"),
                                            f"{where}.sentences[{s}]"))
            owner.append(image_index)
        paths.append(image_path)
        ids.append(image_id)
    if not paths:
        raise DataFormatError(f"{path}: no images in split(s) {sorted(wanted)} "
                              f"({n_in_split} listed, {skipped['missing_image']} missing)")
    name = f"karpathy:{data.get('dataset', path.stem)}"
    return RetrievalDataset(split=split, captions=tuple(captions), caption_to_image=np.asarray(owner),
                            image_ids=tuple(ids), images=tuple(paths), name=name, sources=(str(path),),
                            skipped=_common.report_skipped(name, skipped, n_in_split))
