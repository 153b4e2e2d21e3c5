"""Exact resume: a run killed with SIGKILL (between checkpoints, or with an async save in flight) and restarted
with the same command ends with parameters bitwise equal to an uninterrupted run."""

import os
import signal

import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.train.helpers import exported_leaves, run_python, train_cmd

CONFIG = "configs/maxmatch_shapes.py:smoke"
COMMON = ("--config.train.num_steps=8", "--config.train.checkpoint_every=2", "--config.train.eval_every=0",
          "--config.train.log_every=1", "--config.data.prefetch=2")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("uninterrupted"))
    run_python(train_cmd(CONFIG, workdir, *COMMON))
    return exported_leaves(workdir)


@pytest.mark.slow
# 3: between checkpoints (the step-2 save may still be in flight); 5: after step 4's async save was issued.
@pytest.mark.parametrize("kill_at", [3, 5])
def test_sigkill_then_restart_is_bitwise_identical(tmp_path, reference, kill_at):
    workdir = str(tmp_path / "run")
    proc = run_python(train_cmd(CONFIG, workdir, *COMMON, f"--config.train.fault_injection_kill_at_step={kill_at}"),
                      check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not os.path.exists(os.path.join(workdir, "export")), "the killed run must not have finished"
    # Only finished checkpoints are visible to a restart; a half-written one never is.
    manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"))
    finished = manager.all_steps()
    assert all(s % 2 == 0 and s <= kill_at for s in finished), finished
    manager.close()

    proc = run_python(train_cmd(CONFIG, workdir, *COMMON))
    if finished:
        assert f"resumed from step {max(finished)}" in proc.stdout
    resumed = exported_leaves(workdir)
    assert sorted(resumed) == sorted(reference)
    for key in reference:
        np.testing.assert_array_equal(resumed[key], reference[key], err_msg=key)
