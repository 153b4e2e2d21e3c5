"""L2 normalisation of rows, in the library's two forms (one place for both):

    unit_normalize(x)  = x / max(‖x‖₂, ε)              as torch `F.normalize` (set heads, evaluation, plots); numpy
                                                       or jax
    safe_normalize(x)  = x · rsqrt(max(‖x‖₂², ε²))      jax only; finite value *and gradient* at x = 0 (the gradient of
                                                       ‖x‖ at 0 is 0/0), for losses and scorers that may see zero
                                                       rows (collapsed residuals, padded tokens)
"""

import jax
import jax.numpy as jnp
import numpy as np

NORM_EPS_SQ = 1e-12  # ε² of `safe_normalize`


def unit_normalize(x, eps: float = 1e-12):
    """x / max(‖x‖₂, eps) along the last axis; numpy in → numpy out, jax in (or traced) → jax out.

    The floor keeps an all-zero row finite (it stays zero) instead of dividing by zero.
    """
    xp = np if isinstance(x, (np.ndarray, np.generic)) else jnp
    return x / xp.maximum(xp.linalg.norm(x, axis=-1, keepdims=True), eps)


def safe_normalize(x: jax.Array, axis: int = -1) -> jax.Array:
    """x / sqrt(max(‖x‖², 1e-12)); finite value and gradient for x = 0 (a zero row stays zero)."""
    sq = jnp.sum(x * x, axis=axis, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(sq, NORM_EPS_SQ))
