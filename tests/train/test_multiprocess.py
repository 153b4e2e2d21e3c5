"""Two processes on localhost (jax.distributed + gloo CPU collectives) train the smoke config and agree with one
process driving the same two-device mesh."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.subprocess_env import subprocess_env
from tests.train.helpers import REPO, communicate_all, coordinator_port, exported_leaves, run_python, train_cmd

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
    env = subprocess_env()
    procs = [subprocess.Popen(
        [sys.executable, *train_cmd(CONFIG, multi, *COMMON, f"--config.distributed.coordinator=127.0.0.1:{port}",
                                    "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = communicate_all(procs, timeout=600)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-5000:]}"
    assert "2 process(es)" in outs[0][0]

    rows = lambda d: [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if "loss/total" in l]
    np.testing.assert_allclose([r["loss/total"] for r in rows(multi)], [r["loss/total"] for r in rows(single)],
                               atol=1e-5)
    a, b = exported_leaves(single), exported_leaves(multi)
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(b[key], a[key], atol=1e-5, err_msg=key)


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
