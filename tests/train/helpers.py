"""Shared helpers for the training tests: configs, subprocess runs with simulated devices, exported params."""

import os
import subprocess
import sys

import jax
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(args, *, devices: int = 1, timeout: int = 600, env_extra=None, check=True):
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"command {args} failed with {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\n"
                             f"stderr:\n{proc.stderr[-6000:]}")
    return proc


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
