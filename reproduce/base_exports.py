"""Frozen bases kept beside their records, so heads trained in several sessions sit on one set of weights.

A Flow-CLIP study head trains on its base's export (`<base cell>/export/`: Orbax params + export.json), which lives
in the scratch output directory and is gone on a fresh machine. Retraining the base costs ~30 min a session and
yields the same numbers only as far as CPU training is deterministic. So for cells whose spec says `archive_export`
(the study's bases, a few MB each), `--archive DIR` keeps the export too, beside the cell's record:

    DIR/<budget>/<cell>/seed<k>.export.npz    the final parameters, one float array per leaf, keyed by its path
                                              ("text/layer_0/attn/kernel"); no pickled objects
    DIR/<budget>/<cell>/seed<k>.export.json   the export's export.json (full config, tokenizer spec, provenance)

- **save**: a finished cell with a complete export (its export.json exists) is written to DIR unless the archived
  arrays and info are already equal to it.
- **restore**: a cell whose record is in the output directory (restored or run) but whose export is missing gets
  its export rebuilt there from DIR with `mmjax.train.export.export_params`, so every reader of an export
  (heads, `mmjax.load`, evaluation) sees an ordinary one. A damaged or incomplete pair raises ValueError naming the
  file, before anything is written.

These names do not match `seed<k>.json`, so `reproduce.archive.load_all` and `archived_seeds` ignore them.
"""

from __future__ import annotations

import json
import os

import numpy as np

EXPORT = "export"           # the final parameters: what the heads load (`mmjax.train.export.load_exported`)
SEP = "/"


def archive_paths(archive: str, budget: str, name: str, seed: int) -> tuple[str, str]:
    stem = os.path.join(archive, budget, name, f"seed{seed}.export")
    return stem + ".npz", stem + ".json"


def flatten(params) -> dict[str, np.ndarray]:
    """{"a/b/c": array} of a nested dict of arrays (`flax.traverse_util.flatten_dict`); ValueError for a key that
    is empty or holds "/" (its path could not be split back)."""
    from flax import traverse_util
    flat = traverse_util.flatten_dict(params)
    bad = [k for k in flat if any(not isinstance(p, str) or not p or SEP in p for p in k)]
    if bad:
        raise ValueError(f"parameter key {SEP.join(map(str, bad[0]))!r} cannot be archived (keys must be non-empty "
                         f"strings without {SEP!r})")
    return {SEP.join(k): np.asarray(v) for k, v in flat.items()}


def unflatten(flat: dict[str, np.ndarray]) -> dict:
    from flax import traverse_util
    return traverse_util.unflatten_dict(flat, sep=SEP)


def _export_dir(cell, out: str) -> str:
    return os.path.join(cell.workdir(out), EXPORT)


def read_archived_arrays(npz_path: str, json_path: str) -> tuple[dict[str, np.ndarray], dict]:
    missing = [p for p in (npz_path, json_path) if not os.path.exists(p)]
    if missing:
        raise ValueError(f"{missing[0]} not found: an archived export needs both {os.path.basename(npz_path)} and "
                         f"{os.path.basename(json_path)}")
    try:
        with np.load(npz_path, allow_pickle=False) as z:
            flat = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ValueError(f"{npz_path}: unreadable archived export ({e})") from e
    if not flat or any(not np.issubdtype(a.dtype, np.number) for a in flat.values()):
        raise ValueError(f"{npz_path}: an archived export holds numeric arrays, one per parameter; found "
                         f"{ {k: str(a.dtype) for k, a in flat.items()} or 'none'}")
    try:
        with open(json_path) as f:
            info = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{json_path}: unreadable export info ({e})") from e
    if not isinstance(info, dict) or "full_config" not in info:
        raise ValueError(f"{json_path}: not an export's export.json (no 'full_config')")
    return flat, info


def read_archived(npz_path: str, json_path: str) -> tuple[dict, dict]:
    """(params as a nested dict of numpy arrays, export info) of an archived export: what
    `mmjax.models.frozen_clip.FrozenShapesWorldCLIP` takes, without writing an export directory (notebook 03)."""
    flat, info = read_archived_arrays(npz_path, json_path)
    return unflatten(flat), info


def _equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def save(cells, out: str, archive: str, budget: str) -> list[str]:
    """Archives the export of every finished `archive_export` cell of `cells` in `out`; returns the .npz paths it
    (re)wrote."""
    from reproduce.archive import _write_json
    from reproduce.runner import read_record
    from mmjax.train.export import read_export
    written = []
    for cell in cells:
        export = _export_dir(cell, out)
        if (not cell.spec.archive_export or read_record(cell.workdir(out)) is None
                or not os.path.exists(os.path.join(export, "export.json"))):
            continue
        params, info = read_export(export)
        flat = flatten(params)
        npz_path, json_path = archive_paths(archive, budget, cell.name, cell.seed)
        if os.path.exists(npz_path) and os.path.exists(json_path):
            old_flat, old_info = read_archived_arrays(npz_path, json_path)
            if _equal(old_flat, flat) and old_info == info:
                continue
        os.makedirs(os.path.dirname(npz_path), exist_ok=True)
        with open(npz_path + ".tmp", "wb") as f:
            np.savez_compressed(f, **flat)
        os.replace(npz_path + ".tmp", npz_path)
        _write_json(json_path, info)  # written second: a pair with a stale info is rewritten on the next save
        written.append(npz_path)
    return written


def restore(cells, out: str, archive: str, budget: str) -> list[str]:
    """Rebuilds in `out` the export of every `archive_export` cell that has its record there but no export, from
    `archive`; returns the cells restored ("name/seed<k>"). Every archived pair is read and checked first."""
    pending = []
    for cell in cells:
        npz_path, json_path = archive_paths(archive, budget, cell.name, cell.seed)
        if (not cell.spec.archive_export or not os.path.exists(os.path.join(cell.workdir(out), "cell.json"))
                or os.path.exists(os.path.join(_export_dir(cell, out), "export.json"))
                or not (os.path.exists(npz_path) or os.path.exists(json_path))):
            continue
        pending.append((cell, *read_archived_arrays(npz_path, json_path)))
    if not pending:
        return []
    from mmjax.train.export import export_params
    restored = []
    for cell, flat, info in pending:
        export_params(cell.workdir(out), unflatten(flat), info, name=EXPORT)
        restored.append(f"{cell.name}/seed{cell.seed}")
    return restored


def check_heads_have_bases(cells, out: str, archive: str, budget: str) -> None:
    """ValueError when a head of `cells` sits on a base of `cells` whose record is in `out` (so the grid will not
    train it) but whose export is not: the heads could not load it. Names the archive files that would supply it."""
    from reproduce.grid import clip_of
    names = {(c.name, c.seed) for c in cells}
    for head in (c for c in cells if c.spec.needs_clip):
        base = clip_of(head)
        if (base.name, base.seed) not in names:
            continue
        done = os.path.exists(os.path.join(base.workdir(out), "cell.json"))
        if done and not os.path.exists(os.path.join(_export_dir(base, out), "export.json")):
            npz_path, _ = archive_paths(archive or "<archive>", budget, base.name, base.seed)
            raise ValueError(f"{base.name} seed {base.seed} is finished in {out} but has no export, and the heads "
                             f"({head.name}) load it: archive it ({npz_path}, written by --archive when the base "
                             f"runs) or retrain it (delete {base.workdir(out)} and its archived record)")
