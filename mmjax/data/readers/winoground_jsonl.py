"""Winoground (``examples.jsonl`` + ``images/``, facebook/winoground).

Each line: ``{id, image_0, image_1, caption_0, caption_1, tag, secondary_tag, num_main_preds, collapsed_tag}``;
``image_k`` is a file stem under image_root (``images/``), extension ``.png``.

Represented as **grouped records**: example e becomes two consecutive `CompositionalRecord`s, both with candidates
``(caption_0, caption_1)``: position 0 = image_0 with gold 0, position 1 = image_1 with gold 1;
``meta = {'example_id', 'position', 'tag', 'secondary_tag', 'num_main_preds'}``, ``subgroup = collapsed_tag``,
``task='winoground'``. Scoring both records gives the four scores s(c_j, i_k): text score = both records correct
under the strict policy; image score = s(c0,i0) > s(c0,i1) and s(c1,i1) > s(c1,i0) (compare the two records'
score vectors); group = both. `group_pairs` re-pairs the records and checks the invariant. If either image of an
example is missing under ``missing_images='skip'`` both records are dropped (``skipped['missing_image']`` counts
records, 2 per example).
"""

from __future__ import annotations

import collections
import os

from mmjax.data.readers import _common
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError


def winoground(path: str | os.PathLike, image_root: str | os.PathLike | None, *, image_ext: str = ".png",
               missing_images: _common.MissingImages = "error") -> CompositionalDataset:
    """Read ``examples.jsonl`` into grouped records (see module docstring); image_root = the ``images`` dir."""
    path = _common.require_file(path, "Winoground examples.jsonl")
    checker = _common.ImageChecker(image_root, missing_images, str(path))
    skipped: collections.Counter = collections.Counter()
    records, total, seen_ids = [], 0, _common.UniqueIds("example id")
    for lineno, ex in _common.iter_jsonl(path):
        total += 2
        where = f"{path}:{lineno}"
        example_id = _common.field(ex, "id", where, (int, str))
        seen_ids.add(example_id, where)
        captions = tuple(_common.caption(_common.field(ex, f"caption_{k}", where), f"{where} caption_{k}")
                         for k in (0, 1))
        stems = [_common.field(ex, f"image_{k}", where) for k in (0, 1)]
        images = [checker.resolve(stem + image_ext, f"{where} image_{k}") for k, stem in enumerate(stems)]
        if any(im is None for im in images):
            skipped["missing_image"] += 2
            continue
        meta = {"example_id": example_id, "tag": ex.get("tag"), "secondary_tag": ex.get("secondary_tag"),
                "num_main_preds": ex.get("num_main_preds")}
        subgroup = ex.get("collapsed_tag")
        for k in (0, 1):
            records.append(_common.record(where, CompositionalRecord, image=images[k], captions=captions,
                                          correct=k, task="winoground", subgroup=subgroup, image_id=stems[k],
                                          meta={**meta, "position": k}))
    if total == 0:
        raise DataFormatError(f"{path}: no examples")
    return CompositionalDataset(records=records, name="winoground", sources=(str(path),),
                                skipped=_common.report_skipped("winoground", skipped, total))


def group_pairs(records) -> list[tuple[CompositionalRecord, CompositionalRecord]]:
    """(image_0 record, image_1 record) per example, checking the grouping invariant."""
    records = list(records)
    if len(records) % 2:
        raise ValueError(f"{len(records)} Winoground records: not whole examples")
    pairs = []
    for a, b in zip(records[0::2], records[1::2]):
        ok = (a.task == b.task == "winoground" and a.meta.get("example_id") == b.meta.get("example_id")
              and (a.meta.get("position"), b.meta.get("position")) == (0, 1) and a.captions == b.captions)
        if not ok:
            raise ValueError(f"records for example {a.meta.get('example_id')!r} are not an (image_0, image_1) pair")
        pairs.append((a, b))
    return pairs
