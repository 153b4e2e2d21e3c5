"""The environment of a subprocess a test starts (train.py runs, `python -m reproduce`, multi-device workers).

One place, so every child sees what the session set up: tests/conftest.py's XLA flags (the compile level) and
compile cache, offline hubs, the CPU platform, the repository importable.
"""

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subprocess_env(devices: int = 1, env_extra=None, drop_flags=()) -> dict:
    """This process's environment with `devices` simulated CPU devices (the session's other XLA flags kept, such as
    the compile flags tests/conftest.py sets, except those named in `drop_flags`), offline, the repository first on
    PYTHONPATH; `env_extra` last."""
    env = dict(os.environ)
    dropped = ("xla_force_host_platform_device", *drop_flags)
    kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.lstrip("-").startswith(dropped)]
    env["XLA_FLAGS"] = " ".join(kept + [f"--xla_force_host_platform_device_count={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return env
