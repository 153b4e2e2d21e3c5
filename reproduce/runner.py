"""Resumable execution of the reproduction grid, one cell at a time (reproduce/README.md).

A cell trains in `DIR/cells/<name>/seed<k>/` with `mmjax.experiment.run` (which itself resumes from the cell's
checkpoints), evaluates its final and best-on-validation exports into `eval_final/` and `eval_best/`, and writes
`cell.json` last (atomically), so a finished cell is exactly one that has a `cell.json`; a second invocation skips
it. A cell that fails writes `cell_error.json` instead and is retried next time; the grid goes on without it.
`DIR/grid.json` records the budget, and a directory of one budget refuses to be continued with another.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import time
import traceback

from mmjax.batching import progress
from mmjax.jsonl import read_jsonl
from mmjax.provenance import environment
from mmjax.train import TrainingPreempted
from reproduce import paths, provenance
from reproduce.grid import CONFIG_DIR, Cell, budget_summary, build_config, clip_of, hold_configs
from reproduce.curves import training_curves
from reproduce.metrics import cell_arrays, cell_metrics


def _write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)  # a reader never sees half a file; an interrupted write leaves the cell unfinished


def _read_json(path: str):
    with open(path) as f:
        return json.load(f)


def check_budget(out: str, budget: str, seeds: int) -> None:
    """Creates `out/grid.json` or checks that `out` holds a grid of the same budget. Its "seeds" is 1 + the largest
    seed any run of the directory covered (`seeds` here: first seed + number of seeds), the range a reader scans."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "grid.json")
    held = _read_json(path) if os.path.exists(path) else {"budget": budget, "seeds": 0}
    if held.get("budget") != budget:
        raise ValueError(f"{path}: this directory holds a {held.get('budget')!r} budget grid; --budget {budget} "
                         f"needs another --out")
    _write_json(path, {"budget": budget, "seeds": max(seeds, int(held.get("seeds", 0)))})


def training_stability(workdir: str) -> dict:
    """{"steps_logged", "nonfinite_losses", "final_loss", "best_val_rsum"} from the cell's metrics.jsonl and
    train_summary.json (the report's stability column)."""
    losses = []
    path = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(path):
        losses = [float(row["loss/total"]) for row in read_jsonl(path) if "loss/total" in row]
    summary_path = os.path.join(workdir, "train_summary.json")
    best = _read_json(summary_path).get("best_rsum") if os.path.exists(summary_path) else None
    return {"steps_logged": len(losses), "nonfinite_losses": sum(not math.isfinite(x) for x in losses),
            "final_loss": losses[-1] if losses else None,
            "best_val_rsum": best if best is not None and math.isfinite(best) else None}


def read_record(workdir: str) -> dict | None:
    """The cell's `cell.json`, or None when it has not finished. A record written before records carried training
    curves gets them from the cell's metrics.jsonl when that is still there — unless the record was restored from
    the archive: then a metrics.jsonl beside it is another run's (a rerun in the same directory), not its own."""
    path = os.path.join(workdir, "cell.json")
    if not os.path.exists(path):
        return None
    record = _read_json(path)
    if "curves" not in record and not record.get("restored_from"):
        curves = training_curves(workdir)
        if curves:
            record["curves"] = curves
    return record


def code_version() -> dict:
    """{"commit", "dirty"} of the repository's checkout now ({} outside a git checkout). A cell records the version
    its grid process was launched on (`run_grid` reads it once, before the first cell): a Python process keeps the
    code it imported, so the checkout's HEAD when the cell ends may be a later commit the cell never ran."""
    root = paths.ROOT
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        # No git here (a copy of the tree on a lent machine): the commit the launching checkout declared, if the
        # copy's digest of what the cells compute matches it (reproduce.provenance.declared_version).
        return provenance.declared_version(root)
    return {"commit": commit, "dirty": dirty}


CODE_MOVED_NOTE = "ran the code of"   # a record's note when the checkout moved while its grid process ran
RESUMED_NOTE = "resumed from step"    # a record's note when its cell resumed from a checkpoint (wall time: the rest)


def machine_description() -> str:
    """Cores, platform and Python; and the accelerator when jax computes on one (what the wall time was measured on)."""
    desc = f"{os.cpu_count()} CPU core(s), {platform.machine()} {platform.system()}, Python {platform.python_version()}"
    devices = environment().get("jax") or {}
    if devices.get("backend") not in (None, "cpu") and "device_kind" in devices:
        desc += f", {devices.get('device_count', 1)} × {devices['device_kind']} ({devices['backend']})"
    return desc


def short_version(version: dict) -> str:
    """'<commit[:10]>[+dirty]' of a `code_version()` dict ('(no git)' without a commit)."""
    return (version.get("commit", "")[:10] or "(no git)") + ("+dirty" if version.get("dirty") else "")


def _export_info(workdir: str, name: str) -> dict | None:
    path = os.path.join(workdir, name, "export.json")  # written last: its presence means a complete export
    return _read_json(path) if os.path.exists(path) else None


def _evaluate(config, workdir: str, params: str) -> dict:
    from mmjax import experiment
    return experiment.evaluate(config, workdir, params=params, out_dir=os.path.join(workdir, f"eval_{params}"),
                               verbose=False)


def check_clip_source(cells: list[Cell], clip_out: str) -> None:
    """Raises ValueError naming the file when a head of `cells` has no finished, exported CLIP cell of its seed in
    `clip_out` (`--clip-from`; restored records carry no export, so that grid's CLIP must have run here)."""
    for clip in sorted({clip_of(c) for c in cells if c.spec.needs_clip}, key=lambda c: (c.name, c.seed)):
        clip_dir = clip.workdir(clip_out)
        for name in ("cell.json", os.path.join("export", "export.json")):
            if not os.path.exists(os.path.join(clip_dir, name)):
                raise ValueError(f"--clip-from {clip_out}: {os.path.join(clip_dir, name)} not found (run the "
                                 f"{clip.name} cell of seed {clip.seed} there first)")


def run_cell(cell: Cell, out: str, budget: str, clip_out: str = "", launch_code: dict | None = None,
             config_dir: str = CONFIG_DIR) -> dict:
    """Trains and evaluates one cell (module docstring); returns its cell.json content. `clip_out`: the grid
    directory whose CLIP a head sits on (default `out`). `launch_code`: `code_version()` when this process started
    the grid (default: now); when the checkout has moved on by the time the cell ends, the record keeps both."""
    launch_code = code_version() if launch_code is None else launch_code
    from mmjax import experiment
    workdir = cell.workdir(out)
    config = build_config(cell, budget, out, clip_out=clip_out, config_dir=config_dir)
    os.makedirs(workdir, exist_ok=True)
    if cell.spec.needs_clip:  # the shared feature cache is written by the first head that needs it
        os.makedirs(config.data.cache_dir, exist_ok=True)
    t0 = time.perf_counter()
    start_step = experiment.run(config, workdir)["start_step"]
    t_train = time.perf_counter() - t0
    similarity = cell.spec.similarity
    evaluated = {"final": _evaluate(config, workdir, "final")}
    final_info, best_info = _export_info(workdir, "export"), _export_info(workdir, "export_best")
    steps = {"final": (final_info or {}).get("step"), "best": (best_info or {}).get("step")}
    notes = [f"frozen CLIP of {clip_out} (--clip-from)"] if clip_out and cell.spec.needs_clip else []
    if start_step:  # an interrupted cell resumed: this process timed only the steps after the checkpoint
        notes.append(f"{RESUMED_NOTE} {start_step}: the training wall time counts only steps {start_step}–"
                     f"{steps['final']}")
    if best_info is None:
        notes.append("no best-on-validation export: the best columns show the final parameters")
    elif steps["best"] is not None and steps["best"] == steps["final"]:
        # Same step, same parameters: evaluating again would reproduce the final numbers exactly.
        notes.append(f"best-on-validation step = final step ({steps['final']}): one evaluation serves both")
    else:
        evaluated["best"] = _evaluate(config, workdir, "best")
    t_eval = time.perf_counter() - t0 - t_train
    end_code = code_version()
    if end_code != launch_code:  # committed (or edited) while the process ran: the cell ran the launch version
        notes.append(f"{CODE_MOVED_NOTE} {short_version(launch_code)} (the grid's launch); the checkout was at "
                     f"{short_version(end_code)} when the cell ended")
    record = {
        "name": cell.name, "group": cell.spec.group, "label": cell.spec.label, "seed": cell.seed, "budget": budget,
        "budget_detail": budget_summary(config), "steps": steps,
        "best_params": best_info is not None, "notes": notes,
        **({"clip_from": clip_out} if clip_out and cell.spec.needs_clip else {}),
        "wall_s": {"train": t_train, "eval": t_eval, "total": t_train + t_eval},
        "load_avg_end": list(os.getloadavg()),  # 1/5/15-min load when the cell finished (shared-machine context)
        "machine": machine_description(),       # what the wall time was measured on
        "environment": environment(),           # Python, platform and package versions (jax, flax, optax, ...)
        "code": {**launch_code, "at": "launch"},  # older records lack "at": theirs is the checkout at the cell's end
        **({"code_at_end": end_code} if end_code != launch_code else {}),
        "stability": training_stability(workdir),
        "curves": training_curves(workdir),
        "metrics": {k: cell_metrics(evaluated.get(k, evaluated["final"]), similarity) for k in ("best", "final")},
        "arrays": {k: cell_arrays(evaluated.get(k, evaluated["final"])) for k in ("best", "final")},
        "figures": {k: (evaluated.get(k, evaluated["final"]).get("figures") or {}) for k in ("best", "final")},
    }
    _write_json(os.path.join(workdir, "cell.json"), record)
    error_path = os.path.join(workdir, "cell_error.json")
    if os.path.exists(error_path):
        os.remove(error_path)
    return record


def load_cell(cell: Cell, out: str) -> dict | None:
    return read_record(cell.workdir(out))


PAUSE_FILE = "PAUSE"
PAUSE_POLL_S = 10.0


def wait_while_paused(out: str, log=print) -> float:
    """Blocks while `out/PAUSE` exists; returns the seconds waited. The grid checks it between cells, so a machine
    can be freed for other work without stopping a cell mid-way (its wall time would then count the pause)."""
    path = os.path.join(out, PAUSE_FILE)
    if not os.path.exists(path):
        return 0.0
    log(f"[reproduce] paused: {path} exists (remove it to continue)")
    t0 = time.perf_counter()
    while os.path.exists(path):
        time.sleep(PAUSE_POLL_S)
    waited = time.perf_counter() - t0
    log(f"[reproduce] resumed after {waited:.0f} s")
    return waited


def hold_launch_code(cells: list[Cell], config_dir: str = CONFIG_DIR) -> dict[str, str]:
    """Imports every `mmjax` module and loads the config files `cells` build on, now: a Python process keeps what
    it imported, but `mmjax` imports some modules on first use (a task, an evaluator) and the grid reads a cell's
    config file when the cell starts, which in a grid of many hours would be the checkout of that hour while the
    record names the launch commit. Returns {module or config file: error} for what cannot be loaded here (an
    optional dependency missing, a broken config: a cell that needs it fails as it would have)."""
    import importlib
    import pkgutil

    import mmjax
    errors = {}
    for info in pkgutil.walk_packages(mmjax.__path__, "mmjax."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            errors[info.name] = f"{type(e).__name__}: {e}"
    return {**errors, **hold_configs({cell.spec.config_file for cell in cells}, config_dir)}


def run_grid(cells: list[Cell], out: str, budget: str, *, log=print, on_finished=None, clip_out: str = "",
             config_dir: str = CONFIG_DIR) -> dict:
    """Runs every unfinished cell of `cells` in order; returns {"done": [...], "skipped": [...], "failed": [...]}.
    A Flow-CLIP head whose CLIP cell failed is not attempted (it would fail for the same reason). `config_dir`: the
    configs the cells build on (`--config-dir`). `on_finished(cell)` is called after each cell that finishes here
    (the CLI archives its record at once, so a grid stopped hours later loses no finished cell). Before each cell it
    waits while `out/PAUSE` exists (`wait_while_paused`)."""
    status = {"done": [], "skipped": [], "failed": []}
    failed_clip = set()
    launch_code = code_version()  # what this process imported; every cell it runs records this version
    for name, error in hold_launch_code(cells, config_dir).items():
        log(f"[reproduce] {name} could not be loaded at launch ({error}); a cell that needs it will fail")
    with progress(len(cells), "reproduce", unit="cell", mininterval=0.0) as bar:
        for i, cell in enumerate(cells):
            tag = f"[reproduce] {i + 1}/{len(cells)} {cell.name} seed{cell.seed}"
            if load_cell(cell, out) is not None:
                status["skipped"].append(f"{cell.name}/seed{cell.seed}")
                log(f"{tag}: finished earlier, skipped")
            elif cell.spec.needs_clip and clip_of(cell) in failed_clip:
                status["failed"].append(f"{cell.name}/seed{cell.seed}")
                log(f"{tag}: not run (its CLIP cell failed)")
            else:
                wait_while_paused(out, log)
                t0 = time.perf_counter()
                try:
                    record = run_cell(cell, out, budget, clip_out=clip_out, launch_code=launch_code,
                                      config_dir=config_dir)
                except TrainingPreempted:  # not the cell's failure: the machine is being taken; stop the grid
                    log(f"{tag}: preempted (its checkpoint is saved; the same command resumes the cell)")
                    raise
                except Exception as e:  # noqa: BLE001 — one cell's failure is recorded; the grid goes on
                    os.makedirs(cell.workdir(out), exist_ok=True)
                    _write_json(os.path.join(cell.workdir(out), "cell_error.json"),
                                {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
                    status["failed"].append(f"{cell.name}/seed{cell.seed}")
                    failed_clip.add(cell)  # a head of this cell (if it is a CLIP) is not attempted
                    log(f"{tag}: FAILED after {time.perf_counter() - t0:.1f} s — {type(e).__name__}: {e}")
                else:
                    w = record["wall_s"]
                    status["done"].append(f"{cell.name}/seed{cell.seed}")
                    log(f"{tag}: {w['total']:.1f} s (train {w['train']:.1f} s, eval {w['eval']:.1f} s)")
                    if on_finished is not None:
                        on_finished(cell)
            bar.update(1)
    return status
