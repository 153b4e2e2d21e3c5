"""The one L2 normalisation of the library: rows to unit length, for numpy and jax arrays alike."""

import jax.numpy as jnp
import numpy as np


def unit_normalize(x, eps: float = 1e-12):
    """x / max(‖x‖₂, eps) along the last axis; numpy in → numpy out, jax in (or traced) → jax out.

    The floor keeps an all-zero row finite (it stays zero) instead of dividing by zero.
    """
    xp = np if isinstance(x, (np.ndarray, np.generic)) else jnp
    return x / xp.maximum(xp.linalg.norm(x, axis=-1, keepdims=True), eps)
