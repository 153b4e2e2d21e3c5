"""Masked pooling of token features into one global vector (the `maxmatch.img_pool = 'max'` global,
docs/design.md#region-tower).

    masked_max(x, μ)_d = max_{n: μ_n = 1} x_{n,d}

Padded tokens are replaced by the most negative finite value of the dtype (never −inf), so they can never win the
max while any valid token exists; gradients flow only to the winning valid token. A sample with no valid token at
all pools to the zero vector (rather than the fill value, which would overflow in a following LayerNorm).
Reference: `kdwonn/DivE` `model_spm.py` `variable_len_pooling(..., 'max')` (`masked_fill(~idx, -finfo.max)`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def masked_max(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Max over the token axis of x [B, N, D] ignoring tokens with mask [B, N] == 0. Returns [B, D]."""
    if x.ndim != 3:
        raise ValueError(f"x must be [B, N, D], got shape {x.shape}")
    if mask is None:
        return jnp.max(x, axis=1)
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask must be [B, N] = {x.shape[:2]}, got shape {mask.shape}")
    valid = mask.astype(bool)
    pooled = jnp.max(jnp.where(valid[..., None], x, jnp.finfo(x.dtype).min), axis=1)
    return jnp.where(jnp.any(valid, axis=1, keepdims=True), pooled, 0.0)
