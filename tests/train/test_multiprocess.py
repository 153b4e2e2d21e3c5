"""Two processes on localhost (jax.distributed + gloo CPU collectives) train the smoke config and agree with one
process driving the same two-device mesh; the run's writers (regular and best checkpoints, the best export) save the
same step back to back without sharing Orbax barrier keys; a signal to one process stops both after the same step."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from mmjax.train import EXIT_PREEMPTED
from tests.train.helpers import (communicate_all, coordinator_port, exported_leaves, output_tails, run_processes,
                                 run_python, start_processes, train_cmd, wait_for_logged_lines)

CONFIG = "configs/maxmatch_shapes.py:smoke"
# SGD for the comparison (see sharding_worker.py: Adam's first steps amplify re-association noise).
COMMON = ("--config.train.num_steps=3", "--config.train.eval_every=3", "--config.train.log_every=1",
          "--config.train.checkpoint_every=3", "--config.optim.name=sgd", "--config.optim.lr=0.05")


@pytest.mark.slow
def test_two_processes_agree_with_one(tmp_path):
    single = str(tmp_path / "single")
    run_python(train_cmd(CONFIG, single, *COMMON), devices=2)

    multi = str(tmp_path / "multi")
    port = coordinator_port()
    outs = run_processes([train_cmd(CONFIG, multi, *COMMON, f"--config.distributed.coordinator=127.0.0.1:{port}",
                                    "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}")
                          for i in range(2)], timeout=600)
    assert "2 process(es)" in outs[0][0]

    rows = lambda d: [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if "loss/total" in l]
    np.testing.assert_allclose([r["loss/total"] for r in rows(multi)], [r["loss/total"] for r in rows(single)],
                               atol=1e-5)
    a, b = exported_leaves(single), exported_leaves(multi)
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(b[key], a[key], atol=1e-5, err_msg=key)


# Each step as the trainer does at a new best validation score on a checkpoint step: the best checkpoint (async), the
# best export, the regular checkpoint. With Orbax's default barrier keys the best save's background finalisation and
# the regular save's start met on one key: "Barrier ThreadSaveMultiHostValueHolder:set_value_start is already ongoing"
# on one process, the other waiting out the shutdown barrier (a CI failure of test_two_processes_agree_with_one).
WRITERS_WORKER = r"""
import sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]), shutdown_timeout_seconds=20)
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from mmjax.train.checkpoint import Checkpointer
from mmjax.train.export import export_params
from mmjax.train.sharding import make_mesh
mesh = make_mesh((("data", 2),))
state = {"w": jax.jit(lambda: jnp.arange(64.0).reshape(8, 8), out_shardings=NamedSharding(mesh, P()))()}
ckpt = Checkpointer(sys.argv[3], keep=2)
for step in range(1, 9):
    ckpt.save_best(step, state, {"step": step}, float(step))
    export_params(sys.argv[3], {"params": {"w": np.arange(4.0)}}, {"step": step}, name="export_best")
    ckpt.save(step, state, {"step": step}, force=True)
ckpt.close()
print("SAVED", ckpt.latest_step(), flush=True)
"""


def test_best_and_regular_saves_of_one_step_do_not_share_barriers(tmp_path):
    script = tmp_path / "writers_worker.py"
    script.write_text(WRITERS_WORKER)
    port = coordinator_port()
    outs = run_processes([[str(script), f"127.0.0.1:{port}", str(i), str(tmp_path / "w")] for i in range(2)],
                         timeout=120)
    assert all("SAVED 8" in out for out, _ in outs), outs


@pytest.mark.slow
def test_a_signal_to_one_process_stops_both_after_the_same_step(tmp_path):
    """SIGTERM reaches process 1 only: the requests are ORed across processes (`agree_later`, read one step late),
    so both save the same step, say so and exit 75 together (a disagreement would hang the collective save)."""
    workdir = tmp_path / "run"
    port = coordinator_port()
    procs = start_processes([train_cmd(
        CONFIG, str(workdir), "--config.train.num_steps=100000", "--config.train.checkpoint_every=100000",
        "--config.train.log_every=1", "--config.train.eval_every=0", "--config.train.eval_every_epoch=False",
        f"--config.distributed.coordinator=127.0.0.1:{port}", "--config.distributed.num_processes=2",
        f"--config.distributed.process_id={i}") for i in range(2)])
    wait_for_logged_lines(workdir, 3, procs)
    procs[1].send_signal(signal.SIGTERM)
    outs = communicate_all(procs, timeout=300)
    assert [p.returncode for p in procs] == [EXIT_PREEMPTED] * 2, output_tails(procs, outs)
    said = re.search(r"stopped by a signal on another process after step (\d+)", outs[0][0])
    assert said, output_tails(procs, outs)
    steps = [int(d) for d in os.listdir(workdir / "checkpoints") if d.isdigit()]
    assert max(steps) == int(said.group(1)) >= 3, (steps, said.group(0))


def test_coordinator_port_is_free_and_never_ephemeral():
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    port = coordinator_port()
    assert 10000 <= port < low
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # still free


def test_a_hung_process_is_killed_and_every_output_reported():
    fast = subprocess.Popen([sys.executable, "-c", "print('done')"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    hung = subprocess.Popen([sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with pytest.raises(AssertionError, match=r"(?s)after 3 s were killed.*process 0 \(exit 0\).*done.*"
                                             r"process 1 \(exit -9\).*waiting"):
        communicate_all([fast, hung], timeout=3)
    assert hung.poll() is not None
