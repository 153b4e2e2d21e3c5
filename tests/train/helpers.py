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
