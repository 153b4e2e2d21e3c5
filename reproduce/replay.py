"""Replay a committed cell: did the code changes since its commit, or the machine, reach its numbers?

The report's per-row code table (`provenance.rows_code`) can say which files under `mmjax/` and `configs/` changed
between the commits a row's cells ran on, not whether a change reached a row's numbers. A replay answers that for one
record: it trains the record's cell (same budget, cell and seed, so the grid's same config, data order and schedule:
`grid.build_config` + `mmjax.experiment.run`, what `runner.run_cell` trains) for `--steps` steps and compares every
logged training loss and validation metric the record keeps as curves (`curves.training_curves`, the same fields)
at the steps both have. With `--at-record-commit` it also trains the record's own commit (a git worktree) on this
machine, which separates the two causes of a difference:

    record  vs  own commit here      the machine or environment (or a dirty record's uncommitted edits)
    own commit here  vs  current     the code changes since the record

Equal floats at every compared step mean that, over those steps, that cause did not reach the training.

    python -m reproduce.replay --record docs/reproduction/records/converged/sh_full/seed0.json --steps 40 \
        --at-record-commit --out workdir/replay

writes `docs/reproduction/replays/<budget>_<cell>_seed<k>_<steps>steps.json` (both commits, both environments, the
comparisons; what the report's code section reads) and prints one line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
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


# The child: the grid's own config for the cell and `mmjax.experiment.run` — what `runner.run_cell` trains — stopped
# by a trainer hook after `steps` steps. Written to a file and run with the tree under test first on the path, so the
# same script trains the current checkout and a worktree of the record's commit (whose API this uses: make_grid,
# build_config and run's hooks are unchanged since the study began).
_CHILD = """
import sys
from reproduce import grid
from mmjax import experiment
budget, name, seed, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
cell = [c for c in grid.make_grid(1, [name], first_seed=seed) if c.name == name][0]
config = grid.build_config(cell, budget, out)
class Stop(Exception):
    pass
def hook(event, step):
    if event == "step" and (step % 20 == 0 or step >= steps):
        print(f"[replay] {name} seed {seed}: step {step} of {steps}", flush=True)
    if event == "step" and step >= steps:
        raise Stop
try:
    experiment.run(config, cell.workdir(out), hooks=[hook])
except Stop:
    pass
"""


def _train(tree: str, budget: str, cell: str, seed: int, out: str, steps: int, python: str) -> dict:
    """Trains the cell from `tree` (a checkout) for `steps` steps in `out`; returns its curves."""
    out = os.path.abspath(out)  # the child runs in `tree`
    workdir = os.path.join(out, "cells", cell, f"seed{seed}")
    if os.path.exists(workdir):
        raise ValueError(f"{workdir} exists: a replay starts from step 0 (remove it or choose another --out)")
    os.makedirs(out, exist_ok=True)
    script = os.path.join(out, "replay_child.py")
    with open(script, "w") as f:
        f.write(_CHILD)
    env = {**os.environ, "PYTHONPATH": tree + os.pathsep + os.environ.get("PYTHONPATH", "")}
    print(f"[replay] {cell} seed {seed}: {steps} steps from {tree} (progress: {out}/replay.log)", flush=True)
    with open(os.path.join(out, "replay.log"), "w") as log:
        proc = subprocess.run([python, script, budget, cell, str(seed), out, str(steps)], cwd=tree,
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    curves = training_curves(workdir)
    if proc.returncode or not curves:
        raise RuntimeError(f"the replay of {cell} seed {seed} in {tree} failed (exit {proc.returncode}; see "
                           f"{out}/replay.log)")
    return curves


def _worktree(commit: str, path: str) -> None:
    subprocess.run(["git", "worktree", "add", "--detach", "--force", path, commit], cwd=paths.ROOT, check=True,
                   capture_output=True, text=True, timeout=120)


def run(record_path: str, steps: int, out: str, *, at_record_commit: bool = False,
        python: str = sys.executable) -> dict:
    """Replays `record_path`'s cell for `steps` steps in `out` at the current checkout and, with
    `at_record_commit`, also at the record's own commit (a temporary git worktree in `out`); returns the replay
    record (module doc)."""
    from reproduce.grid import SPEC_BY_NAME
    from reproduce.runner import code_version
    from mmjax.provenance import environment
    with open(record_path) as f:
        record = json.load(f)
    budget, cell, seed = record["budget"], record["name"], int(record["seed"])
    if not (record.get("curves") or {}).get("train"):
        raise ValueError(f"{record_path}: the record keeps no training curves to compare a replay with")
    spec = SPEC_BY_NAME.get(cell)
    if spec is not None and spec.needs_clip:
        raise ValueError(f"{record_path}: {cell} trains on a frozen base's features; replays cover retrieval cells")
    commit = (record.get("code") or {}).get("commit")
    if at_record_commit and not commit:
        raise ValueError(f"{record_path}: the record names no commit to replay at")
    code, t0 = code_version(), time.perf_counter()
    replayed = _train(paths.ROOT, budget, cell, seed, os.path.join(out, "current"), steps, python)
    result = {"record": os.path.relpath(os.path.abspath(record_path), paths.ROOT), "budget": budget, "cell": cell,
              "seed": seed, "recorded_code": record.get("code"), "replay_code": code, "steps": steps,
              "recorded_environment": record.get("environment"), "replay_environment": environment(),
              "recorded_machine": record.get("machine"),
              "comparison": compare_curves(record["curves"], replayed, max_step=steps)}
    if at_record_commit:
        tree = os.path.abspath(os.path.join(out, "record_commit_tree"))
        _worktree(commit, tree)
        try:
            own = _train(tree, budget, cell, seed, os.path.join(out, "record_commit"), steps, python)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=paths.ROOT, capture_output=True)
        # record vs its own commit today: the machine and environment; its own commit vs now: the code since
        result["at_record_commit"] = {"vs_record": compare_curves(record["curves"], own, max_step=steps),
                                      "vs_current": compare_curves(own, replayed, max_step=steps)}
    if not result["comparison"]["values"]:
        raise RuntimeError(f"replay of {record_path} logged nothing to compare (see {out}/current/replay.log)")
    result["wall_s"] = time.perf_counter() - t0
    return result


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


def environment_changes(recorded: dict | None, replayed: dict | None) -> list[str]:
    """'name: recorded → replayed' for the platform, the CPU's SIMD flags and every package whose version differs
    ('–' = absent)."""
    a, b = recorded or {}, replayed or {}
    out = [f"platform {a.get('platform') or '–'} → {b.get('platform') or '–'}"] \
        if a.get("platform") != b.get("platform") else []
    ca, cb = a.get("cpu"), b.get("cpu")
    if ca is None and cb is not None:
        out.append("the record names no CPU features (recorded since 2026-12-06)")
    elif ca is not None and cb is not None and ca != cb:
        fa, fb = set(ca.get("simd", [])), set(cb.get("simd", []))
        out.append(f"CPU {ca.get('model')} → {cb.get('model')}, SIMD flags "
                   + " ".join([f"−{f}" for f in sorted(fa - fb)] + [f"+{f}" for f in sorted(fb - fa)]))
    pa, pb = a.get("packages") or {}, b.get("packages") or {}
    return out + [f"{k} {pa.get(k) or '–'} → {pb.get(k) or '–'}" for k in sorted(set(pa) | set(pb))
                  if (pa.get(k) or None) != (pb.get(k) or None)]


def _difference(cmp: dict) -> str:
    f = cmp["first_difference"]
    return (f"from step {f['step']} ({f['key']}: {f['recorded']:.9g} vs {f['replayed']:.9g}; largest |Δ| "
            f"{max(cmp['max_abs_diff'].values()):.3g})")


def sentence(replay: dict) -> str:
    """One line for the report: which record, which commits, what was equal, and what that attributes."""
    from reproduce.runner import short_version as short
    rc, pc, cmp = replay.get("recorded_code") or {}, replay.get("replay_code") or {}, replay["comparison"]
    changes = environment_changes(replay.get("recorded_environment"), replay.get("replay_environment"))
    env = f" (environment since the record: {'; '.join(changes)})" if changes else " (same environment)"
    head = (f"{replay['cell']} seed {replay['seed']} ({replay['budget']}; recorded at {short(rc)}) replayed at "
            f"{short(pc)} for {max(cmp['steps'])} steps")
    own = replay.get("at_record_commit")
    if own is None:
        if cmp["equal"]:
            return f"{head}: all {cmp['values']} logged loss and validation values are bitwise equal{env}."
        return f"{head}: values differ {_difference(cmp)}{env}."
    code, machine = own["vs_current"], own["vs_record"]
    text = f"{head} and at its own commit: "
    text += ("the two replays are bitwise equal, so the code changes since did not reach these steps; "
             if code["equal"] else f"the two replays differ {_difference(code)}, so the code changes since did; ")
    dirty = " and the record's uncommitted edits" if rc.get("dirty") else ""
    text += ("the replay at its own commit equals the record" if machine["equal"] else
             f"the replay at its own commit differs from the record {_difference(machine)}: the machine or "
             f"environment{dirty} did")
    return text + env + "."


def summary(replays: list[dict]) -> str:
    """One sentence over all replays: how many equal their records, and where the others' differences come from."""
    if not replays:
        return ""
    equal = [r for r in replays if r["comparison"]["equal"]]
    own = [r for r in replays if not r["comparison"]["equal"] and r.get("at_record_commit")]
    machine = [r for r in own if r["at_record_commit"]["vs_current"]["equal"]]
    code = [r for r in own if not r["at_record_commit"]["vs_current"]["equal"]]
    parts = [f"{len(equal)} of {len(replays)} replays equal their records bitwise"]
    if own:
        parts.append(f"of the {len(replays) - len(equal)} that differ, {len(own)} were also replayed at their own "
                     f"commit: in {len(machine)} the code changes since did not reach the compared steps (the "
                     f"difference is the machine's or environment's), in {len(code)} they did")
    if len(replays) - len(equal) - len(own):
        parts.append(f"{len(replays) - len(equal) - len(own)} differing replay(s) were not run at their own commit, "
                     "so their difference is not attributed")
    return "; ".join(parts) + "."


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reproduce.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--record", required=True, help="a committed cell record (docs/reproduction/records/...)")
    p.add_argument("--steps", type=int, required=True, help="replay until this many steps are logged")
    p.add_argument("--out", required=True, help="a fresh output directory for the replayed cell")
    p.add_argument("--at-record-commit", action="store_true", help="also replay at the record's own commit (a git "
                   "worktree): separates what the code changes did from what the machine or environment did")
    p.add_argument("--save", default=REPLAY_DIR, help="directory the replay record is written to")
    args = p.parse_args(argv)
    try:
        replay = run(args.record, args.steps, args.out, at_record_commit=args.at_record_commit)
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"python -m reproduce.replay: error: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.save, exist_ok=True)
    path = os.path.join(args.save, f"{replay['budget']}_{replay['cell']}_seed{replay['seed']}_{args.steps}steps.json")
    with open(path, "w") as f:
        json.dump(replay, f, indent=1)
    print(sentence(replay))
    print(f"[replay] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
