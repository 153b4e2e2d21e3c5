"""Shared test setup.

Tests never download anything (HF_HUB_OFFLINE=1) and compare numbers at float32 reference precision:
`jax_default_matmul_precision` is set to "float32" for the whole session (TF32 or bf16 passes on accelerators
would otherwise change float32 matmuls). Tests that need several devices run a worker in a subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=8` set before jax is imported there (`tests/subprocess_env.py`).

The subprocesses the tests start (train.py runs, multi-device workers, notebook kernels) share one persistent XLA
compilation cache, a fresh directory per pytest session (made by the first process that imports this file — under
xdist the controller, whose environment both workers inherit — and removed at its exit): many of them train the
smoke config, and a cached train step loads in a fraction of its compile time (smoke train.py 29 → 12 s) — for the
same program only: an outcome field such as `train.num_steps` (the LR schedule's length) makes a new one. Cached
executables are the compiled ones, bit for bit (tests/train/test_resume.py checks that a run resumed from cached
executables ends bitwise equal to a fresh one). The variables are set after this process imported jax, so without
xdist (`-n 0`) the in-process tests compile as before; xdist workers import jax with the variables already set, so
their in-process tests share the cache too. A cache directory the caller already set is kept.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "float32")

# The suite is compile-bound (tiny models; most tests trace and compile a program once and run it a few times), and on
# CPU XLA spends most of a compile in code generation. Two flags make it cheaper:
# - backend optimisation level 0 skips most of LLVM's optimisation passes: a smoke train.py compiles its 23 programs in
#   half the time (about 50 -> 26 s), and the whole suite ran in 31 min instead of 46 (same machine, not quiet);
# - --xla_cpu_use_fusion_emitters=false emits fusions with XLA's elemental IR emitter instead of the MLIR fusion
#   emitters: ten solver and set-score programs compile in 1.5 s instead of 2.6-2.9, a smoke train.py (no compile
#   cache) takes 12.3 s instead of 16.0, and test_edge_cases.py + test_losses.py 72 s instead of 121 (2026-12-07,
#   paired runs on one machine).
# Results agree to float32 rounding, not bit for bit (LLVM contracts and vectorises differently: after a 6-step smoke
# run at level 0, 60 of 71 exported arrays differ from level 3 by at most 1e-4), so a bitwise test compares two runs
# with the same flags; the suite passes with them (and passed at jax's defaults when level 0 came in). Set for this
# process (read when its backend starts) and inherited by the xdist workers and every subprocess
# (tests/subprocess_env.py keeps them when it sets a device count, less those a test drops). A flag the caller sets is
# kept: `XLA_FLAGS="--xla_backend_optimization_level=3 --xla_cpu_use_fusion_emitters=true"` runs the suite as jax
# compiles by default.
TEST_COMPILE_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join([_flags] + [f"--{name}={value}" for name, value in TEST_COMPILE_FLAGS.items()
                                               if name not in _flags]).strip()

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache_dir = tempfile.mkdtemp(prefix="mmjax-tests-xla-cache-")
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
    os.environ.update(JAX_COMPILATION_CACHE_DIR=_cache_dir, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


def pytest_collection_modifyitems(config, items):
    """Files with a `slow` test run first, then the others by decreasing number of tests (each file's own order kept).
    With `-n 2 --dist loadfile` a file is one unit of work handed to the next free worker, so the long files start
    early and the many short ones fill both workers to the end. xdist's default order (most tests first, pyproject
    turns it off with `--no-loadscope-reorder`) put the long files, which have few tests, last: one worker idled
    minutes while the other finished them."""
    by_file = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def rank(name):
        slow = any(item.get_closest_marker("slow") for item in by_file[name])
        return (0, 0) if slow else (1, -len(by_file[name]))

    items[:] = [item for name in sorted(by_file, key=rank) for item in by_file[name]]
