"""Cell records kept in the repository, so a grid outlives its output directory (reproduce/README.md).

A grid's output directory (checkpoints, exports, evaluations; hundreds of MB) is scratch outside git, and a fresh
checkout has none of it. All the report needs of a finished cell is its `cell.json` record: every number, the K × K
element-similarity matrix, budget, code version, wall time and load. `--archive DIR` keeps those records in DIR, a
few KB each and meant to be committed (the project keeps them in `docs/reproduction/records/`):

    DIR/<budget>/<cell>/seed<k>.json

- **restore** (before the grid runs): each record DIR holds for a cell of this run that the output directory lacks
  is written there as the cell's `cell.json`, so the runner skips the cell and the report includes it. A restored
  record is checked against the file it came from (cell name, seed and budget must match its path).
- **save** (after the grid runs, also with `--report-only`): every finished record of the output directory is
  written to DIR; a file whose content is unchanged is left alone.

Archived records carry no figure paths (they pointed into the scratch directory); restoring re-draws each heat map
from the record's stored matrix into the cell directory.
"""

from __future__ import annotations

import copy
import json
import os

RECORD = "cell.json"


def record_path(archive: str, budget: str, name: str, seed: int) -> str:
    return os.path.join(archive, budget, name, f"seed{seed}.json")


def _write_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _portable(record: dict) -> dict:
    """The record without the figure paths (they name files in the scratch directory, meaningless elsewhere)."""
    r = copy.deepcopy(record)
    r["figures"] = {k: {} for k in (record.get("figures") or {"best": {}, "final": {}})}
    r.pop("restored_from", None)
    return r


def save(cells, out: str, archive: str, budget: str) -> list[str]:
    """Writes the finished record of every cell of `cells` in `out` to `archive`; returns the paths it (re)wrote."""
    from reproduce.runner import read_record
    written = []
    for cell in cells:
        found = read_record(cell.workdir(out))
        if found is None:
            continue
        record = _portable(found)
        dst = record_path(archive, budget, cell.name, cell.seed)
        if os.path.exists(dst):
            with open(dst) as f:
                if json.load(f) == record:
                    continue  # unchanged: no rewrite, no diff
        _write_json(dst, record)
        written.append(dst)
    return written


def _check(record, path: str, name: str, seed: int, budget: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{path}: a cell record must be a JSON object, got {type(record).__name__}")
    for field, want in (("name", name), ("seed", seed), ("budget", budget)):
        if record.get(field) != want:
            raise ValueError(f"{path}: field {field!r} is {record.get(field)!r} but the file's place in the archive "
                             f"says {want!r}")
    missing = [k for k in ("metrics", "wall_s", "group") if k not in record]
    if missing:
        raise ValueError(f"{path}: not a cell record (missing {missing})")


def _redraw_heatmaps(record: dict, workdir: str) -> None:
    for which, arrays in (record.get("arrays") or {}).items():
        matrix = (arrays or {}).get("element_similarity")
        if matrix:
            from mmjax.evaluation import plots  # matplotlib only when there is a map to draw
            path = plots.plot_similarity_heatmap(matrix, os.path.join(workdir, f"restored_{which}_heatmap.png"))
            record.setdefault("figures", {}).setdefault(which, {})["element_similarity"] = path


def restore(cells, out: str, archive: str, budget: str) -> list[str]:
    """Writes each archived record of `cells` that `out` lacks as that cell's `cell.json`; returns the cells
    restored ("name/seed<k>"). Raises ValueError naming the file for a record that is unreadable or misplaced; no
    cell is written until every record of the run has been read and checked."""
    pending = []
    for cell in cells:
        path = record_path(archive, budget, cell.name, cell.seed)
        if os.path.exists(os.path.join(cell.workdir(out), RECORD)) or not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: unreadable cell record ({e})") from e
        _check(record, path, cell.name, cell.seed, budget)
        pending.append((cell, path, record))
    restored = []
    for cell, path, record in pending:
        workdir = cell.workdir(out)
        os.makedirs(workdir, exist_ok=True)
        _redraw_heatmaps(record, workdir)
        record["restored_from"] = path
        _write_json(os.path.join(workdir, RECORD), record)
        restored.append(f"{cell.name}/seed{cell.seed}")
    return restored


def archived_seeds(archive: str, budget: str) -> int:
    """1 + the largest seed archived for `budget` (0 when none): how many seeds a restore of that budget covers."""
    root = os.path.join(archive, budget)
    seeds = [int(f[4:-5]) for _, _, files in os.walk(root) for f in files
             if f.startswith("seed") and f.endswith(".json") and f[4:-5].isdigit()]
    return max(seeds) + 1 if seeds else 0


def load_all(archive: str) -> list[dict]:
    """Every record of `archive` (all budgets), each checked against its place (`<budget>/<cell>/seed<k>.json`)
    and marked with the file it came from; sorted by budget, cell and seed. Raises ValueError naming a bad file."""
    records = []
    if not os.path.isdir(archive):
        return records
    for budget in sorted(os.listdir(archive)):
        root = os.path.join(archive, budget)
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
            if not os.path.isdir(os.path.join(root, name)):  # a stray file beside the cell directories
                continue
            files = [f for f in os.listdir(os.path.join(root, name))
                     if f.startswith("seed") and f.endswith(".json") and f[4:-5].isdigit()]
            for f in sorted(files, key=lambda f: int(f[4:-5])):  # seed2 before seed10
                path = os.path.join(root, name, f)
                try:
                    with open(path) as fh:
                        record = json.load(fh)
                except (OSError, json.JSONDecodeError) as e:
                    raise ValueError(f"{path}: unreadable cell record ({e})") from e
                _check(record, path, name, int(f[4:-5]), budget)
                records.append({**record, "restored_from": path})
    return records
