"""Replay a committed cell at the current checkout: did the code changes since its commit reach its numbers?

The report's per-row code table (`provenance.rows_code`) can say which files under `mmjax/` and `configs/` changed
between the commits a row's cells ran on, not whether a change reached a row's numbers. A replay answers that for one
record: it trains the record's cell (same budget, cell and seed, so the same config, data order and schedule) at the
current checkout in a child process, stops it cleanly (SIGTERM: the trainer checkpoints and exits) once `--steps`
steps are logged, and compares every logged training loss and validation metric the record keeps as curves
(`curves.training_curves`, the same fields) at the steps both have. Equal floats at every step mean that, for those
steps, nothing that changed reached the training; the first difference is named with both values.

    python -m reproduce.replay --record docs/reproduction/records/converged/sh_divmmd/seed0.json --steps 480 \
        --out workdir/replay

writes `docs/reproduction/replays/<budget>_<cell>_seed<k>.json` (what the report's code section reads) and prints
the comparison. Same machine and package versions are checked, not assumed: the replay record keeps both
environments, and the report names a mismatch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

from reproduce import paths
from reproduce.curves import training_curves

REPLAY_DIR = os.path.join(paths.ROOT, "docs", "reproduction", "replays")


def compare_curves(recorded: dict, replayed: dict, max_step: int | None = None) -> dict:
    """{"values", "steps", "max_abs_diff": {key: float}, "equal": bool, "first_difference": {...} | None} over the
    (part, key, step) the two curves share (up to `max_step`). Values are floats as logged (JSON round trip)."""
    values, steps, diffs, first = 0, set(), {}, None
    for part in ("train", "val"):
        a, b = recorded.get(part) or {}, replayed.get(part) or {}
        at_a = {s: i for i, s in enumerate(a.get("step", []))}
        common = sorted(s for s in (b.get("step") or []) if s in at_a and (max_step is None or s <= max_step))
        at_b = {s: i for i, s in enumerate(b.get("step", []))}
        for key in sorted(set(a) & set(b) - {"step"}):
            for s in common:
                x, y = a[key][at_a[s]], b[key][at_b[s]]
                if x is None or y is None:
                    continue
                values += 1
                steps.add(s)
                d = 0.0 if x == y else (math.inf if not (math.isfinite(x) and math.isfinite(y)) else abs(x - y))
                diffs[key] = max(diffs.get(key, 0.0), d)
                if d and (first is None or s < first["step"]):
                    first = {"step": s, "key": key, "recorded": x, "replayed": y}
    return {"values": values, "steps": sorted(steps), "max_abs_diff": diffs, "equal": values > 0 and first is None,
            "first_difference": first}


def _last_step(workdir: str) -> int:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    last = 0
    with open(path) as f:
        for line in f:
            try:
                last = max(last, int(json.loads(line).get("step", 0)))
            except (ValueError, json.JSONDecodeError):  # a line being written
                continue
    return last


def run(record_path: str, steps: int, out: str, python: str = sys.executable, poll_s: float = 5.0) -> dict:
    """Replays `record_path`'s cell for `steps` logged steps in `out`; returns the replay record (module doc)."""
    from reproduce.runner import code_version
    from mmjax.provenance import environment
    with open(record_path) as f:
        record = json.load(f)
    budget, cell, seed = record["budget"], record["name"], int(record["seed"])
    if not (record.get("curves") or {}).get("train"):
        raise ValueError(f"{record_path}: the record keeps no training curves to compare a replay with")
    workdir = os.path.join(out, "cells", cell, f"seed{seed}")
    if os.path.exists(workdir):
        raise ValueError(f"{workdir} exists: a replay starts from step 0 (remove it or choose another --out)")
    os.makedirs(out, exist_ok=True)
    code = code_version()
    cmd = [python, "-m", "reproduce", "--budget", budget, "--seeds", "1", "--first-seed", str(seed), "--cells", cell,
           "--out", out, "--no-report"]
    t0 = time.perf_counter()
    with open(os.path.join(out, "replay.log"), "w") as log:
        child = subprocess.Popen(cmd, cwd=paths.ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while child.poll() is None and _last_step(workdir) < steps:
            time.sleep(poll_s)
            print(f"[replay] {cell} seed {seed}: step {_last_step(workdir)} of {steps} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)  # the trainer checkpoints the step in flight and exits
            child.wait()
    replayed = training_curves(workdir)
    comparison = compare_curves(record["curves"], replayed, max_step=steps)
    if not comparison["values"]:
        raise RuntimeError(f"replay of {record_path} logged nothing to compare (see {out}/replay.log)")
    return {"record": os.path.relpath(record_path, paths.ROOT), "budget": budget, "cell": cell, "seed": seed,
            "recorded_code": record.get("code"), "replay_code": code, "steps": steps,
            "recorded_environment": record.get("environment"), "replay_environment": environment(),
            "recorded_machine": record.get("machine"), "wall_s": time.perf_counter() - t0, "comparison": comparison}


def load(directory: str = REPLAY_DIR) -> list[dict]:
    """The committed replay records, sorted by file name ([] without the directory)."""
    if not os.path.isdir(directory):
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                out.append(json.load(f))
    return out


def sentence(replay: dict) -> str:
    """One line for the report: which record, which commits, and whether every compared value was equal."""
    rc, pc, cmp = replay.get("recorded_code") or {}, replay.get("replay_code") or {}, replay["comparison"]

    def short(c):
        return (c.get("commit") or "?")[:10] + ("+dirty" if c.get("dirty") else "")

    same_env = (replay.get("recorded_environment") or {}).get("packages") == \
        (replay.get("replay_environment") or {}).get("packages")
    head = (f"{replay['cell']} seed {replay['seed']} ({replay['budget']}; recorded at {short(rc)}) replayed at "
            f"{short(pc)} for {max(cmp['steps'])} steps")
    env = "" if same_env else " (package versions differ from the record's: a difference may come from them)"
    if cmp["equal"]:
        return (f"{head}: all {cmp['values']} logged loss and validation values at {len(cmp['steps'])} steps are "
                f"bitwise equal{env}.")
    f = cmp["first_difference"]
    return (f"{head}: values differ from step {f['step']} on ({f['key']}: {f['recorded']:.6g} recorded, "
            f"{f['replayed']:.6g} replayed; largest |Δ| {max(cmp['max_abs_diff'].values()):.3g}){env}.")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reproduce.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--record", required=True, help="a committed cell record (docs/reproduction/records/...)")
    p.add_argument("--steps", type=int, required=True, help="replay until this many steps are logged")
    p.add_argument("--out", required=True, help="a fresh output directory for the replayed cell")
    p.add_argument("--save", default=REPLAY_DIR, help="directory the replay record is written to")
    args = p.parse_args(argv)
    try:
        replay = run(args.record, args.steps, args.out)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"python -m reproduce.replay: error: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.save, exist_ok=True)
    path = os.path.join(args.save, f"{replay['budget']}_{replay['cell']}_seed{replay['seed']}.json")
    with open(path, "w") as f:
        json.dump(replay, f, indent=1)
    print(sentence(replay))
    print(f"[replay] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
