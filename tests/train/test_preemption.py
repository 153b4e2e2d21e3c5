"""What a cluster user meets first: preemption notices, a job launched twice into one workdir, time-based checkpoints.

- SIGTERM at a step the test chooses: the run finishes that step, writes its checkpoint, exits with
  `EXIT_PREEMPTED`; the same command resumes from it and ends bitwise equal to an uninterrupted run.
- A workdir held by a live run (its `LOCK` names this host and a live pid) refuses a second run within seconds,
  naming the holder; a lock left by a dead process on this host is taken over with a warning; one from another
  host is refused.
- `train.checkpoint_every_s` saves whenever that much time has passed, whatever `train.checkpoint_every` says.
- `agree`: the processes of a two-process run OR their stop requests, so all save the same step.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from mmjax.train.preemption import EXIT_PREEMPTED, StopSignals
from mmjax.train.workdir_lock import WorkdirLock, WorkdirLockedError
from tests.train.helpers import (SHARED_STEPS, coordinator_port, exported_leaves, kill_events, kill_worker_cmd,
                                 run_processes, run_python, start_processes, train_cmd, wait_for_logged_lines)

CONFIG = "configs/maxmatch_shapes.py:smoke"
COMMON = (SHARED_STEPS, "--config.train.checkpoint_every=4", "--config.train.eval_every=5",
          "--config.train.log_every=1")


@pytest.mark.slow
def test_sigterm_saves_the_step_exits_75_and_the_restart_is_bitwise_equal(tmp_path):
    reference = str(tmp_path / "uninterrupted")
    run_python(kill_worker_cmd(CONFIG, reference, "none", 0, *COMMON))
    workdir = str(tmp_path / "preempted")
    t0 = time.time()
    proc = run_python(kill_worker_cmd(CONFIG, workdir, "sigterm@step", 6, *COMMON), check=False)
    assert proc.returncode == EXIT_PREEMPTED, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "stopped by SIGTERM after step 7" in proc.stdout, proc.stdout[-2000:]  # the step in flight finished
    assert os.path.isdir(os.path.join(workdir, "checkpoints", "7"))  # 7 is no multiple of checkpoint_every
    assert ("checkpoint", 7) in kill_events(proc.stdout)
    assert not os.path.exists(os.path.join(workdir, "LOCK")) and time.time() - t0 < 300
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    assert max(r["step"] for r in rows) == 7  # nothing logged after the stop

    proc = run_python(kill_worker_cmd(CONFIG, workdir, "none", 0, *COMMON))
    assert "resumed from step 7" in proc.stdout and "this run started at step 7" in proc.stdout
    ref, resumed = exported_leaves(reference), exported_leaves(workdir)
    assert sorted(ref) == sorted(resumed)
    for key in ref:
        np.testing.assert_array_equal(resumed[key], ref[key], err_msg=key)



@pytest.mark.slow
def test_train_py_turns_sigterm_into_exit_75_with_a_checkpoint(tmp_path):
    """The command a cluster runs: `train.py` itself (not the test worker) saves on SIGTERM, says how to resume and
    exits with EXIT_PREEMPTED, without a traceback."""
    workdir = tmp_path / "run"
    proc, = start_processes([train_cmd(CONFIG, str(workdir), "--config.train.num_steps=100000",
                                       "--config.train.checkpoint_every=100000", "--config.train.log_every=1")])
    wait_for_logged_lines(workdir, 2, [proc])
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_PREEMPTED, (proc.returncode, out[-2000:], err[-3000:])
    assert "rerun the same command to resume" in out and "Traceback" not in err, (out[-2000:], err[-3000:])
    steps = [int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit()]
    assert steps and max(steps) >= 1, steps
    assert not (workdir / "LOCK").exists()

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lock_refuses_a_live_holder_takes_over_a_dead_one_and_refuses_another_host(tmp_path):
    lock = WorkdirLock(str(tmp_path)).acquire()
    holder = json.load(open(tmp_path / "LOCK"))
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname() and holder["start"]
    with pytest.raises(WorkdirLockedError, match=rf"in use by pid {os.getpid()} on {socket.gethostname()}"):
        WorkdirLock(str(tmp_path)).acquire()
    lock.release()
    assert not (tmp_path / "LOCK").exists()

    (tmp_path / "LOCK").write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "start": "x"}))
    with pytest.warns(UserWarning, match="stale lock"):
        taken = WorkdirLock(str(tmp_path)).acquire()
    assert json.load(open(tmp_path / "LOCK"))["pid"] == os.getpid()
    taken.release()

    (tmp_path / "LOCK").write_text(json.dumps({"host": "another-host", "pid": 1, "start": "x"}))
    with pytest.raises(WorkdirLockedError, match="another-host.*delete .*LOCK"):
        WorkdirLock(str(tmp_path)).acquire()
    (tmp_path / "LOCK").write_text("{not json")
    with pytest.raises(WorkdirLockedError, match="unreadable lock"):
        WorkdirLock(str(tmp_path)).acquire()


@pytest.mark.slow
def test_a_second_run_in_a_busy_workdir_refuses_within_seconds(tmp_path):
    """A scheduler relaunch: the workdir's lock names a live process on this host (this test's own), so train.py
    exits non-zero at once, names the holder, and leaves the lock and the workdir as they were."""
    workdir = tmp_path / "busy"
    workdir.mkdir()
    (workdir / "LOCK").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                              "start": "2026-01-01T00:00:00+00:00", "argv": ["train.py"]}))
    t0 = time.time()
    proc = run_python(train_cmd(CONFIG, str(workdir), *COMMON), check=False, timeout=300)
    assert proc.returncode != 0 and time.time() - t0 < 120, proc.returncode
    assert "WorkdirLockedError" in proc.stderr and f"pid {os.getpid()}" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]  # one message, not a stack
    assert json.load(open(workdir / "LOCK"))["pid"] == os.getpid()
    assert not (workdir / "checkpoints").exists()


@pytest.mark.slow
def test_time_based_checkpoints(tmp_path):
    """checkpoint_every = 1000 would save only the last step; checkpoint_every_s = 1e-3 saves after every step."""
    proc = run_python(kill_worker_cmd(CONFIG, str(tmp_path / "run"), "none", 0, SHARED_STEPS,
                                      "--config.train.checkpoint_every=1000", "--config.train.checkpoint_every_s=0.001",
                                      "--config.train.eval_every=0", "--config.train.log_every=1"))
    assert [s for e, s in kill_events(proc.stdout) if e == "checkpoint"] == list(range(1, 11))


def test_stop_signals_record_the_signal_and_restore_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert stop.requested is None
        os.kill(os.getpid(), signal.SIGTERM)  # handled: recorded, the process goes on
        time.sleep(0.05)
        assert stop.requested == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)   # a second signal changes nothing
        assert stop.requested == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


AGREE_WORKER = r"""
import os, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
from mmjax.train.preemption import STOP, TIME_DUE, agree, agree_later
pid = jax.process_index()
print("AGREE", agree(STOP if pid == 1 else 0), agree(TIME_DUE if pid == 0 else 0), agree(0), flush=True)
later = [agree_later(STOP if pid == 1 else 0), agree_later(TIME_DUE if pid == 0 else 0), agree_later(0),
         agree_later(STOP | TIME_DUE if pid == 0 else STOP)]   # all queued before the first is read
print("LATER", *[a.result() for a in later], flush=True)
"""


@pytest.mark.slow
def test_processes_agree_on_a_stop_requested_by_one_of_them(tmp_path):
    port = coordinator_port()
    script = tmp_path / "agree_worker.py"
    script.write_text(AGREE_WORKER)
    outs = run_processes([[str(script), f"127.0.0.1:{port}", str(i)] for i in range(2)], timeout=240)
    for out, err in outs:
        assert "AGREE 1 2 0" in out, (out, err[-1000:])
        assert "LATER 1 2 0 3" in out, (out, err[-1000:])
