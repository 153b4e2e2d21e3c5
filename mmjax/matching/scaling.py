"""Exact power-of-two rescaling of whole problems whose magnitude is far from 1.

The assignment optimum is invariant under multiplying a block by any c > 0, and multiplying float32 values by a power
of two is exact (no rounding) unless a result leaves float32's normal range. The solvers use this in two places:

- `mmjax.matching.padding.square_benefit` rescales a block whose largest valid |score| c_max is below `SMALL` or
  above `LARGE` to c_max ∈ [1, 2) before building the padded benefit matrix, so the padding penalty (2K + 1)·max(1,
  c_max) neither overflows float32 nor dwarfs tiny scores (the auction's certificate tolerance is relative to the
  span of the padded matrix, which includes the penalty);
- `mmjax.matching.auction` rescales a problem whose span is below `SMALL` (or above `LARGE`) to span ∈ [1, 2), so its
  certificate tolerance tol·max(1, span) is relative to the span.

Problems with magnitude in [SMALL, LARGE] (every ordinary input: SMALL = 2⁻¹⁰ ≈ 9.8e-4 < 1e-3) get the factor 1.0
exactly, so their arithmetic is bit-for-bit what it was before rescaling existed. In a rescaled problem, values more
than ~2¹²⁶ times smaller than its magnitude may underflow to (sub)normal zero; they are far below float32's resolution
of any total anyway.
"""

import jax
import jax.numpy as jnp

SMALL = 2.0 ** -10
LARGE = 2.0 ** 64


def _exp2(n):
    """Exact float32 2ⁿ for int32 n in [−126, 127] (built from the exponent bits)."""
    return jax.lax.bitcast_convert_type((n + 127) << 23, jnp.float32)


def pow2_factors(mag, small: float = SMALL, large: float = LARGE):
    """Per-problem (f, 1/f), exact powers of two, for magnitudes `mag` float32[...] (≥ 0).

    f = 1 where small ≤ mag ≤ large, mag = 0 or mag is not finite; otherwise mag·f ∈ [1, 2) (clipped to f ∈
    [2⁻¹²⁶, 2¹²⁶], so a subnormal magnitude is only brought towards 1).
    """
    mag = jnp.asarray(mag, jnp.float32)
    _, e = jnp.frexp(mag)                                   # mag = m·2ᵉ, m ∈ [0.5, 1)
    out = jnp.isfinite(mag) & ((mag > large) | ((mag > 0) & (mag < small)))
    shift = jnp.where(out, jnp.clip(1 - e.astype(jnp.int32), -126, 126), 0)
    return _exp2(shift), _exp2(-shift)
