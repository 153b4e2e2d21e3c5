"""Resume is total: a run SIGKILLed at any point — after a regular or a best save was issued or committed, between
saves, after the export — and restarted with the same command ends bitwise equal to an uninterrupted run (exported
params, best checkpoint, logged steps). Then: a resume with a changed outcome field is refused, a changed operational
field is accepted.

One uninterrupted reference run and one chain of restarts in one workdir, each killed at the next kill point (points
in increasing step order, so every one is reached again after the previous resume). All runs share a persistent XLA
compilation cache: the reference compiles fresh, the restarts load the cached executables — bitwise equality of the
two is also the check that the cache does not change numerics.
"""

import collections
import json
import os
import random
import re
import signal

import numpy as np
import pytest

from tests.train.helpers import compile_cache_env, exported_leaves, kill_events, kill_worker_cmd, run_python

CONFIG = "configs/maxmatch_shapes.py:smoke"
# Validation every 3 steps (best saves when RSUM improves), regular saves every 4: best saves fall between regular
# ones, the case that once made a workdir unrestartable.
COMMON = ("--config.train.num_steps=12", "--config.train.checkpoint_every=4", "--config.train.eval_every=3",
          "--config.train.log_every=1", "--config.data.prefetch=2")
N_KILLS = 7   # the five or six fixed points and at least one random step (each kill is a process start: CI time)


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    return compile_cache_env(str(tmp_path_factory.mktemp("xla_cache")))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_env):
    workdir = str(tmp_path_factory.mktemp("uninterrupted"))
    proc = run_python(kill_worker_cmd(CONFIG, workdir, "none", 0, *COMMON), env_extra=cache_env)
    assert "this run started at step 0" in proc.stdout  # the trainer reports where it started (0: a fresh run)
    return workdir, kill_events(proc.stdout)


def _best(workdir):
    """(step, recorded RSUM, per-array checksums) of the best checkpoint — the checksums pin its exact state."""
    steps = [d for d in os.listdir(os.path.join(workdir, "best")) if d.isdigit()]
    assert len(steps) == 1, steps
    with open(os.path.join(workdir, "best", steps[0], "meta", "metadata")) as f:
        meta = json.load(f)
    return int(steps[0]), meta["best_rsum"], meta["checksums"]


def _logged(workdir):
    """Multiset of (step, metric names) rows of metrics.jsonl (times and rates differ between runs)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return collections.Counter((r["step"], tuple(sorted(k for k in r if k not in ("time", "steps_per_s"))))
                               for r in rows)


def kill_points(events, seed=0):
    """The fixed points plus random ones (fixed seed), one per step, in step order."""
    best = [s for e, s in events if e == "best"]
    regular = [s for e, s in events if e == "checkpoint"]
    last = max(s for e, s in events if e == "step")
    assert best and len(regular) >= 2, f"the reference run must save best and regular checkpoints: {events}"
    fixed = [("best_committed", best[0]),                # right after a best save, before any regular one
             ("checkpoint", regular[0]),                 # a regular save issued, in flight
             ("step", regular[0] + 1),                   # between saves
             ("checkpoint_committed", regular[1]),       # right after a regular save
             ("export", last)]                           # after the export, before the summary
    if len(best) > 1:
        fixed.append(("best_committed", best[1]))
    points = {}
    for event, step in fixed:
        points.setdefault(step, (event, step))
    rng = random.Random(seed)
    free = [s for s in range(1, last + 1) if s not in points]
    for step in rng.sample(free, N_KILLS - len(points)):
        kinds = ["step"] + [e + rng.choice(["", "_committed"]) for e, s in events if s == step and e != "step"]
        points[step] = (rng.choice(kinds), step)
    return [points[s] for s in sorted(points)]


@pytest.mark.slow
def test_kills_at_any_point_then_restart_is_bitwise_identical(tmp_path, reference, cache_env):
    ref_dir, events = reference
    points = kill_points(events)
    assert len(points) >= N_KILLS and {e for e, _ in points} >= {"best_committed", "checkpoint", "step",
                                                                   "checkpoint_committed", "export"}, points
    workdir = str(tmp_path / "run")
    for event, step in points:
        proc = run_python(kill_worker_cmd(CONFIG, workdir, event, step, *COMMON), env_extra=cache_env, check=False)
        assert proc.returncode == -signal.SIGKILL, (event, step, proc.returncode, proc.stderr[-3000:])
        assert f"SIGKILL at ({event.split('_')[0]}, {step})" in proc.stdout, (event, step)
    proc = run_python(kill_worker_cmd(CONFIG, workdir, "none", 0, *COMMON), env_extra=cache_env)
    resumed_at = re.search(r"resumed from step (\d+)", proc.stdout)
    assert resumed_at and f"this run started at step {resumed_at.group(1)}" in proc.stdout, proc.stdout[-2000:]

    reference_params, resumed = exported_leaves(ref_dir), exported_leaves(workdir)
    assert sorted(resumed) == sorted(reference_params)
    for key in reference_params:
        np.testing.assert_array_equal(resumed[key], reference_params[key], err_msg=key)
    assert _best(workdir) == _best(ref_dir)
    # Every logged step once, as in the uninterrupted run (replayed steps are not logged twice).
    assert _logged(workdir) == _logged(ref_dir)

    # Resuming the finished workdir with a changed outcome field is refused, naming it ...
    proc = run_python(kill_worker_cmd(CONFIG, workdir, "none", 0, *COMMON, "--config.data.batch_size=8"),
                      env_extra=cache_env, check=False)
    assert proc.returncode != 0 and "ConfigError" in proc.stderr and "data.batch_size" in proc.stderr, \
        proc.stderr[-3000:]
    # ... a changed operational field is not (and the run's results stay as they were).
    proc = run_python(kill_worker_cmd(CONFIG, workdir, "none", 0, *COMMON, "--config.train.log_every=3"),
                      env_extra=cache_env)
    assert "resumed from step 12" in proc.stdout and "this run started at step 12" in proc.stdout
    for key, value in exported_leaves(workdir).items():
        np.testing.assert_array_equal(value, reference_params[key], err_msg=key)
