"""L2 normalisation of rows, in the library's two forms (one place for both):

    unit_normalize(x)  = x / max(‖x‖₂, ε)              as torch `F.normalize` (set heads, evaluation, plots); numpy
                                                       or jax
    safe_normalize(x)  = x · rsqrt(max(‖x‖₂², ε²))      jax only; finite value *and gradient* at x = 0 (the gradient of
                                                       ‖x‖ at 0 is 0/0), for losses and scorers that may see zero
                                                       rows (collapsed residuals, padded tokens)

Huge rows: ‖x‖² overflows once |x| ≳ 1.8e19 in float32 (3.4e38 = float32's max), which would turn the row into zeros
(x / inf) and score it 0. Rows that may overflow — max |x| above sqrt(max finite / D), D the row length — are first
divided by their max |x| (the result is scale-invariant). Every other row is normalised by exactly the expression
above, bitwise: in jax the row is divided by a selected divisor of exactly 1.0 (`jnp.where`, no branch, no
host sync) held out of the gradient, so values and gradients are unchanged; in numpy only the overflowing rows are
recomputed. Rows holding NaN or ±inf are left to the plain formula (they stay non-finite). For float16 the threshold
is low (≈ 11 for D = 512): such rows are rescaled too, which only changes round-off.
"""

import jax
import jax.numpy as jnp
import numpy as np

NORM_EPS_SQ = 1e-12  # ε² of `safe_normalize`


def _overflow_threshold(dtype, length: int) -> float:
    """The largest max |x| for which a sum of `length` squares cannot overflow in `dtype`."""
    return float(np.sqrt(float(jnp.finfo(dtype).max) / max(int(length), 1)))


def _jax_prescale(x, axis: int):
    """x divided per row by max|x| where ‖x‖² could overflow, by exactly 1.0 elsewhere (module docstring).

    The factor is held out of the gradient: normalisation is scale-invariant, so the gradient of the normalised row
    is still exact, and on ordinary rows (factor 1.0) the cotangent passes through unchanged bitwise."""
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
    big = jax.lax.stop_gradient(jnp.max(jnp.abs(x), axis=axis, keepdims=True))
    huge = jnp.isfinite(big) & (big > _overflow_threshold(dtype, x.shape[axis]))
    # Twice by sqrt(max|x|), not once by max|x|: XLA divides as x·(1/d), and 1/1e38 is subnormal, which the CPU
    # backend flushes to zero. 1/sqrt(3.4e38) ≈ 5e-20 is a normal float32.
    root = jax.lax.stop_gradient(jnp.where(huge, jnp.sqrt(big), 1.0).astype(x.dtype))
    return x / root / root


def unit_normalize(x, eps: float = 1e-12):
    """x / max(‖x‖₂, eps) along the last axis; numpy in → numpy out, jax in (or traced) → jax out.

    The floor keeps an all-zero row finite (it stays zero) instead of dividing by zero. Rows so large that ‖x‖²
    overflows are rescaled first (module docstring); the result on every other finite row is bitwise the plain
    formula.
    """
    if isinstance(x, (np.ndarray, np.generic)):
        norm = np.linalg.norm(x, axis=-1, keepdims=True)
        out = x / np.maximum(norm, eps)
        if np.issubdtype(x.dtype, np.floating) and np.isinf(norm).any():
            out = _numpy_fix_overflow(x, out, norm, eps)
        return out
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating) or x.ndim == 0:
        return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)
    x = _jax_prescale(x, -1)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def _numpy_fix_overflow(x, out, norm, eps):
    """Recompute the rows whose norm overflowed (finite entries, infinite ‖x‖) after dividing by their max |x|."""
    big = np.max(np.abs(x), axis=-1, keepdims=True)
    fix = np.isinf(norm) & np.isfinite(big)
    if not fix.any():
        return out
    scaled = x / np.where(fix, big, 1).astype(x.dtype)
    redone = scaled / np.maximum(np.linalg.norm(scaled, axis=-1, keepdims=True), eps)
    return np.where(fix, redone, out).astype(out.dtype)


def safe_normalize(x: jax.Array, axis: int = -1) -> jax.Array:
    """x / sqrt(max(‖x‖², 1e-12)); finite value and gradient for x = 0 (a zero row stays zero). Rows so large
    that ‖x‖² overflows are rescaled first (module docstring); every other finite row is bitwise the plain formula."""
    if jnp.issubdtype(jnp.result_type(x), jnp.floating) and jnp.ndim(x) > 0:
        x = _jax_prescale(jnp.asarray(x), axis)
    sq = jnp.sum(x * x, axis=axis, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(sq, NORM_EPS_SQ))
