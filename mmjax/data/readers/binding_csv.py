"""CLEVR and PUG:SPARE attribute-binding CSVs (LABCLIP, jayn2u/CLIP-not-BoW-unimodally ``data_loading/clevr.py``,
``data_loading/pug.py``).

* CLEVR ``output_{n}obj.csv`` (images in ``images_{n}obj/``, the image_root): rows
  ``filename,object1,attribute1,object2,attribute2`` -- object before attribute, as LABCLIP's reader swaps them.
  A first row whose first field is ``filename`` is taken as a header. Only 2-object scenes are supported
  (`eval.clevr.num_objects = 2`); other column counts are an error.
* PUG ``PUG_SPARE.csv`` (image_root = the PUG:SPARE directory): a header with at least ``filename, world_name,
  character_name, character2_name, character_texture, character2_texture``; image = ``image_root / world_name /
  filename``.

One record per row: caption ``"{a1} {o1} and {a2} {o2}"``, negative ``"{a2} {o1} and {a1} {o2}"`` (attributes
swapped), gold 0, ``task`` ``'clevr'`` / ``'pug'``, ``meta = {'attributes': (a1, a2), 'objects': (o1, o2)}`` (+
``'world'`` for PUG) so the caller can rebuild LABCLIP's combination splits. Rows where the swap cannot produce a
different meaning are skipped and counted: ``a1 == a2`` (negative = positive; LABCLIP's accuracy excludes them)
-> ``skipped['identical_attributes']``; ``o1 == o2`` (the swap only reorders the phrase) ->
``skipped['identical_objects']``. Tie policies (CLEVR >=, PUG strict) belong to the metric.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError

PUG_COLUMNS = ("filename", "world_name", "character_name", "character2_name", "character_texture",
               "character2_texture")


def _infer_dataset(path: Path) -> str:
    name = path.name.lower()
    if name.startswith("pug"):
        return "pug"
    if name.startswith("output_") or "clevr" in name:
        return "clevr"
    raise ValueError(f"{path}: cannot tell CLEVR from PUG by the file name; pass dataset='clevr' or 'pug'")


def _clevr_rows(path: Path):
    for lineno, row in _common.iter_csv_rows(path):
        row = [v.strip() for v in row]
        if lineno == 1 and row[0].lower() == "filename":
            continue
        if len(row) != 5:
            raise DataFormatError(f"{path}:{lineno}: {len(row)} fields; expected filename,object1,attribute1,"
                                  "object2,attribute2 (only 2-object CLEVR scenes are supported)")
        filename, o1, a1, o2, a2 = row
        yield lineno, filename, (a1, a2), (o1, o2), {}


def _pug_rows(path: Path):
    rows = _common.iter_csv_rows(path)
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataFormatError(f"{path}: empty file, expected a header with {PUG_COLUMNS}") from None
    header = [h.strip() for h in header]
    missing = [c for c in PUG_COLUMNS if c not in header]
    if missing:
        raise DataFormatError(f"{path}:1: header lacks column(s) {missing}")
    col = {c: header.index(c) for c in PUG_COLUMNS}
    for lineno, row in rows:
        if len(row) != len(header):
            raise DataFormatError(f"{path}:{lineno}: {len(row)} fields, header has {len(header)}")
        v = {c: row[i].strip() for c, i in col.items()}
        for c, value in v.items():
            if not value:
                raise DataFormatError(f"{path}:{lineno}: empty field {c!r}")
        yield (lineno, f"{v['world_name']}/{v['filename']}", (v["character_texture"], v["character2_texture"]),
               (v["character_name"], v["character2_name"]), {"world": v["world_name"]})


def clevr_pug(path: str | os.PathLike, image_root: str | os.PathLike | None, *, dataset: str | None = None,
              missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read a CLEVR or PUG:SPARE binding CSV (see module docstring); ``dataset`` is inferred from the file name."""
    path = _common.require_file(path, "binding CSV")
    dataset = dataset or _infer_dataset(path)
    if dataset not in ("clevr", "pug"):
        raise ValueError(f"dataset must be 'clevr' or 'pug', got {dataset!r}")
    checker = _common.ImageChecker(image_root, missing_images, str(path))
    skipped: collections.Counter = collections.Counter()
    records, total = [], 0
    for lineno, rel, (a1, a2), (o1, o2), extra in (_clevr_rows if dataset == "clevr" else _pug_rows)(path):
        total += 1
        where = f"{path}:{lineno}"
        if not all((rel, a1, a2, o1, o2)):
            raise DataFormatError(f"{where}: empty field in {(rel, o1, a1, o2, a2)}")
        if a1 == a2:
            skipped["identical_attributes"] += 1
            continue
        if o1 == o2:
            skipped["identical_objects"] += 1
            continue
        image = checker.resolve(rel, where)
        if image is None:
            skipped["missing_image"] += 1
            continue
        records.append(_common.record(
            where, CompositionalRecord, image=image, captions=(f"{a1} {o1} and {a2} {o2}", f"{a2} {o1} and {a1} {o2}"),
            correct=0, task=dataset, image_id=rel,
            meta={"attributes": (a1, a2), "objects": (o1, o2), "line": lineno, **extra}))
    if total == 0:
        raise DataFormatError(f"{path}: no data rows")
    return CompositionalDataset(records=records, name=dataset, sources=(str(path),),
                                skipped=_common.report_skipped(dataset, skipped, total))
