"""NegCLIP training TSV (``train_neg_clip.tsv`` / ``valid_neg_clip.tsv``, mertyg/vision-language-models-are-bows).

Written by pandas ``to_csv(sep='\\t')``: a header ``<index>\\ttitle\\tfilepath\\tneg_caption\\tneg_image`` (the first,
unnamed column is the pandas index; files without it are accepted too), CSV quoting for fields that contain quotes.
``neg_caption`` is a Python list literal of hard-negative captions, ``neg_image`` a list literal of row indices of
hard-negative images. Both are parsed with ``ast.literal_eval`` (literals only, no code runs).

One `CompositionalRecord` per row: ``captions = (title, *neg_captions)``, ``correct = 0``, ``task = 'negclip'``,
``image = image_root / filepath``, ``image_id = filepath``, ``meta = {'row', 'neg_image', 'num_negatives'}``.
`flowclip.neg_pick = 'first'` takes ``captions[1]``. Rows whose ``neg_caption`` list is empty are kept (one
caption; their negative is invalid) and counted in ``dataset.meta['rows_without_negative']``.

``meta['row']`` is the pandas index (what ``neg_image`` refers to), so with an index column every value must be a
non-negative integer and unique; ``neg_image`` entries must be non-negative integers. Anything else is a
`DataFormatError` naming the line (before, a non-integer index silently fell back to the row position).
"""

from __future__ import annotations

import ast
import collections
import os

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError

_REQUIRED = ("title", "filepath", "neg_caption")


def _row_index(text: str, where: str) -> int:
    value = text.strip()
    if not (value.isascii() and value.isdigit()):
        raise DataFormatError(f"{where}: index column (first, unnamed) is {text!r}, expected a non-negative integer")
    return int(value)


def _literal_list(text: str, where: str, item_type: type) -> list:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as err:
        raise DataFormatError(f"{where}: not a Python list literal ({err.__class__.__name__}): {text[:80]!r}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, item_type) and not isinstance(v, bool)
                                                       for v in value):
        raise DataFormatError(f"{where}: expected a list of {item_type.__name__}, got {text[:80]!r}")
    return list(value)


def negclip_tsv(tsv_path: str | os.PathLike, image_root: str | os.PathLike | None, *,
                missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read a NegCLIP TSV into records (see module docstring); images are resolved against ``image_root``."""
    path = _common.require_file(tsv_path, "NegCLIP TSV")
    rows = _common.iter_csv_rows(path, delimiter="\t")
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataFormatError(f"{path}: empty file, expected a header with {_REQUIRED}") from None
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise DataFormatError(f"{path}:1: header {header} lacks column(s) {missing}")
    col = {name: header.index(name) for name in header if name}
    has_index = header[0] == ""
    checker = _common.ImageChecker(image_root, missing_images, str(path))
    skipped: collections.Counter = collections.Counter()
    records, total, without_negative = [], 0, 0
    row_ids = _common.UniqueIds("row index")
    for row_pos, (lineno, row) in enumerate(rows):
        total += 1
        where = f"{path}:{lineno}"
        if len(row) != len(header):
            raise DataFormatError(f"{where}: {len(row)} fields, header has {len(header)}")
        title = _common.caption(row[col["title"]], f"{where} (title)")
        negatives = [_common.caption(c, f"{where} (neg_caption[{k}])")
                     for k, c in enumerate(_literal_list(row[col["neg_caption"]], f"{where} (neg_caption)", str))]
        row_id = _row_index(row[0], where) if has_index else row_pos
        row_ids.add(row_id, where)
        neg_image = (tuple(_literal_list(row[col["neg_image"]], f"{where} (neg_image)", int))
                     if "neg_image" in col else ())
        if any(v < 0 for v in neg_image):
            raise DataFormatError(f"{where} (neg_image): negative row index in {list(neg_image)}")
        rel = row[col["filepath"]].strip()
        image = checker.resolve(rel, where)
        if image is None:
            skipped["missing_image"] += 1
            continue
        without_negative += not negatives
        records.append(_common.record(
            where, CompositionalRecord, image=image, captions=(title, *negatives), correct=0, task="negclip",
            image_id=rel, meta={"row": row_id, "neg_image": neg_image, "num_negatives": len(negatives)}))
    name = f"negclip:{path.name}"
    return CompositionalDataset(records=records, name=name, sources=(str(path),),
                                skipped=_common.report_skipped(name, skipped, total),
                                meta={"rows_without_negative": without_negative})
