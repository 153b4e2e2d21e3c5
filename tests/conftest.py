"""Shared test setup.

Tests never download anything (HF_HUB_OFFLINE=1) and compare numbers at float32 reference precision:
`jax_default_matmul_precision` is set to "float32" for the whole session (TF32 or bf16 passes on accelerators
would otherwise change float32 matmuls). Tests that need several devices run a worker in a subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=8` set before jax is imported there (`tests/train/helpers.py`).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "float32")
