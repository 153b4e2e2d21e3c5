"""Shared helpers for the training tests: configs, subprocess runs with simulated devices, exported params."""

import os
import random
import socket
import subprocess
import sys
import time

import jax
import numpy as np

from tests.subprocess_env import REPO, subprocess_env

# The bounded smoke runs of test_preemption.py and test_checkpoint.py all take this many steps: the LR schedule's
# length is part of the compiled train step, so one step count is one program, which the session's shared compile
# cache (tests/conftest.py) then holds for every run.
SHARED_STEPS = "--config.train.num_steps=10"


def run_python(args, *, devices: int = 1, timeout: int = 600, env_extra=None, check=True, drop_flags=()):
    env = subprocess_env(devices, env_extra, drop_flags)
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"command {args} failed with {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\n"
                             f"stderr:\n{proc.stderr[-6000:]}")
    return proc


def coordinator_port() -> int:
    """A free localhost port for a `jax.distributed` coordinator, below the kernel's ephemeral range.

    A port from bind(0) is released at once and is ephemeral: in the seconds before the coordinator binds it (imports,
    data), any other bind(0) on the machine may be handed it, e.g. a gloo or gRPC listener of a test in the other
    xdist worker (gRPC binds with SO_REUSEPORT, so two listeners can share it and split the connections); a worker
    then waits on the wrong peer. The kernel never hands out ports below the ephemeral range; one is probed by
    binding it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except OSError:  # not Linux: the IANA ephemeral range starts at 49152
        low = 49152
    for _ in range(100):
        port = random.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [10000, {low}) after 100 tries")


def communicate_all(procs, timeout: float):
    """Waits for every process within one shared `timeout`; on expiry kills those still running and fails with each
    process's output tail (a hung collective shows which process waited where). Returns [(stdout, stderr)]."""
    deadline = time.monotonic() + timeout
    outs, expired = [], False
    for p in procs:
        try:
            outs.append(p.communicate(timeout=None if expired else max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            expired = True
            for q in procs:
                if q.poll() is None:
                    q.kill()
            outs.append(p.communicate())  # after the kill: what it had written
    if expired:
        raise AssertionError(f"processes still running after {timeout:.0f} s were killed\n" + output_tails(procs, outs))
    return outs


def start_processes(commands):
    """Starts every command (the arguments after the interpreter) at once in the tests' subprocess environment, from
    the repository root, output piped. Returns the Popen objects."""
    env = subprocess_env()
    return [subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for args in commands]


def wait_for_logged_lines(workdir, lines: int, procs, timeout: float = 400):
    """Waits until `<workdir>/metrics.jsonl` has `lines` lines (training steps logged) or a process has exited."""
    metrics, deadline = os.path.join(workdir, "metrics.jsonl"), time.time() + timeout
    while not (os.path.exists(metrics) and open(metrics).read().count("\n") >= lines) \
            and all(p.poll() is None for p in procs):
        assert time.time() < deadline, "no training step was logged"
        time.sleep(0.5)


def run_processes(commands, *, timeout: float):
    """`start_processes`, then waits for all within one `timeout` (`communicate_all`) and fails with every process's
    output unless all exit 0. Returns [(stdout, stderr)]."""
    procs = start_processes(commands)
    outs = communicate_all(procs, timeout)
    assert all(p.returncode == 0 for p in procs), output_tails(procs, outs)
    return outs


def output_tails(procs, outs) -> str:
    """Each process's exit code and output tail: a multi-process failure shows in the other process as often as in
    the one that raised (a barrier one process never reached times out in the other)."""
    return "\n".join(f"process {i} (exit {p.returncode}):\nstdout:\n{o[-2000:]}\nstderr:\n{e[-4000:]}"
                     for i, (p, (o, e)) in enumerate(zip(procs, outs)))


def train_cmd(config: str, workdir: str, *overrides: str):
    return ["train.py", f"--config={config}", f"--workdir={workdir}", *overrides]


def exported_leaves(workdir: str):
    from mmjax.train.export import load_exported
    params, _ = load_exported(workdir)
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(params)}


def kill_worker_cmd(config: str, workdir: str, event: str, step: int, *overrides: str):
    """`tests/train/kill_worker.py`: a run of `mmjax.experiment.run` that SIGKILLs itself at (event, step)."""
    return [os.path.join("tests", "train", "kill_worker.py"), config, workdir, event, str(step), *overrides]


def compile_cache_env(cache_dir: str) -> dict:
    """Env for subprocesses sharing one persistent XLA compilation cache, so restarts load instead of recompiling
    (every executable cached, however small or quick to compile)."""
    return {"JAX_COMPILATION_CACHE_DIR": cache_dir, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def kill_events(stdout: str) -> list[tuple[str, int]]:
    """The (event, step) hook calls a kill_worker run printed, in order."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("[kill_worker] event "):
            event, step = line.split()[2:4]
            out.append((event, int(step)))
    return out
