"""ABC-6K (weixi-feng/Structured-Diffusion-Guidance ``ABC-6K.txt``) matched to COCO 2014 images.

The file alternates lines (original COCO caption, attribute-swapped caption); the swapped lines are re-tokenised
(" ," / " ."). It carries no image ids, so the image is recovered [default, `eval.abc.*`] by exact match of the
normalised original caption against the COCO 2014 caption annotations (``captions_train2014.json``,
``captions_val2014.json``: ``{"images": [{"id", "file_name"}], "annotations": [{"image_id", "caption"}]}``):

* normalisation (`normalize_caption`): lower-case, every ASCII punctuation character -> space, whitespace collapsed
  (so "cabinetry, sink" and "cabinetry , sink" agree);
* one matching image -> used; several -> the lowest image id, ``meta['ambiguous_image'] = True`` and all candidates
  in ``meta['candidate_image_ids']``; none -> skipped (``skipped['no_coco_match']``);
* pairs whose two lines are identical after normalisation -> skipped (``skipped['identical_after_normalisation']``).

Image path: ``image_root / train2014|val2014 / file_name`` (the subdirectory is read from COCO's
``COCO_<split>_<id>.jpg`` file name; other names are taken relative to image_root). Records: candidates
``(original, swapped)``, gold 0, ``task='abc6k'``, ``image_id`` = COCO id. Which images are outside Karpathy train
(for the train-disjoint report) is left to the caller, who has the Karpathy JSON. A COCO image id listed twice in
the annotation files (which would silently replace its file name) is a `DataFormatError` naming both places.
"""

from __future__ import annotations

import collections
import os
import re
import string
from collections.abc import Sequence

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError

_PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")
_WS = re.compile(r"\s+")
_COCO_NAME = re.compile(r"^COCO_([a-z]+\d{4})_\d+\.\w+$")


def normalize_caption(text: str) -> str:
    return _WS.sub(" ", _PUNCT.sub(" ", text.lower())).strip()


def _coco_index(paths: Sequence[str | os.PathLike]) -> tuple[dict[str, set[int]], dict[int, str]]:
    by_caption: dict[str, set[int]] = collections.defaultdict(set)
    file_names: dict[int, str] = {}
    seen = _common.UniqueIds("COCO image id")  # across all files: train and val ids must not collide either
    for p in paths:
        p = _common.require_file(p, "COCO caption annotations")
        data = _common.load_json(p)
        for k, img in enumerate(_common.field(data, "images", str(p), list)):
            where = f"{p}: images[{k}]"
            image_id = _common.field(img, "id", where, int)
            seen.add(image_id, where)
            file_names[image_id] = _common.field(img, "file_name", where)
        for k, ann in enumerate(_common.field(data, "annotations", str(p), list)):
            where = f"{p}: annotations[{k}]"
            image_id = _common.field(ann, "image_id", where, int)
            if image_id not in file_names:
                raise DataFormatError(f"{where}: image_id {image_id} is not listed in {p}'s 'images'")
            by_caption[normalize_caption(_common.field(ann, "caption", where))].add(image_id)
    return by_caption, file_names


def abc6k(path: str | os.PathLike, image_root: str | os.PathLike | None, *,
          coco_captions: Sequence[str | os.PathLike],
          missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read ABC-6K pairs and attach COCO 2014 images (see module docstring).

    Args:
      path: ``ABC-6K.txt``.
      image_root: the COCO directory holding ``train2014/`` and ``val2014/``.
      coco_captions: the COCO 2014 caption annotation files (train and val).
      missing_images: ``'error'`` | ``'skip'`` (counted) | ``'unchecked'``.
    """
    path = _common.require_file(path, "ABC-6K text file")
    if isinstance(coco_captions, (str, os.PathLike)) or not coco_captions:
        raise ValueError("coco_captions must be a non-empty list of COCO caption annotation files")
    lines = _common.read_lines(path)
    if len(lines) % 2:
        raise DataFormatError(f"{path}:{len(lines)}: odd number of lines ({len(lines)}); expected "
                              "(original, swapped) pairs")
    by_caption, file_names = _coco_index(coco_captions)
    checker = _common.ImageChecker(image_root, missing_images, str(path))
    skipped: collections.Counter = collections.Counter()
    records, ambiguous = [], 0
    for k in range(len(lines) // 2):
        line = 2 * k + 1
        original = _common.caption(lines[line - 1], f"{path}:{line}")
        swapped = _common.caption(lines[line], f"{path}:{line + 1}")
        key = normalize_caption(original)
        if key == normalize_caption(swapped):
            skipped["identical_after_normalisation"] += 1
            continue
        candidates = sorted(by_caption.get(key, ()))
        if not candidates:
            skipped["no_coco_match"] += 1
            continue
        image_id = candidates[0]
        file_name = file_names[image_id]
        m = _COCO_NAME.match(file_name)
        image = checker.resolve(f"{m.group(1)}/{file_name}" if m else file_name, f"{path}:{line}")
        if image is None:
            skipped["missing_image"] += 1
            continue
        ambiguous += len(candidates) > 1
        records.append(_common.record(
            f"{path}:{line}", CompositionalRecord, image=image, captions=(original, swapped), correct=0,
            task="abc6k", image_id=str(image_id),
            meta={"pair_index": k, "line": line, "ambiguous_image": len(candidates) > 1,
                  "candidate_image_ids": tuple(candidates)}))
    return CompositionalDataset(records=records, name="abc6k",
                                sources=(str(path), *(str(p) for p in coco_captions)),
                                skipped=_common.report_skipped("abc6k", skipped, len(lines) // 2),
                                meta={"pairs": len(lines) // 2, "ambiguous_image": ambiguous})
