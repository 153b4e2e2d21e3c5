"""Generalized Pooling Operator (GPO) of VSE∞ (Chen et al., CVPR 2021), docs/design.md#gpo.

For a set of n valid feature vectors x_1..x_n ∈ R^D:

    x̃_{k,d}  = k-th largest of {x_{1,d}, …, x_{n,d}}           (each dimension sorted independently, descending)
    z_k      = BiGRU(PE₃₂(k)),  k = 0..n-1                       (two directions' outputs averaged)
    w        = softmax_k( (w_lin · z_k) / τ ),  τ = 0.1          (positions ≥ n scored −10000 → weight 0)
    pooled_d = Σ_k w_k x̃_{k,d}

The weights depend only on n; they interpolate between max (w = e₁), mean (w uniform) and any other order statistic
mix. Reference: `woodfrog/vse_infty` `lib/modules/aggr/gpo.py` (`positional_encoding_1d`, `GPO`).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


def gpo_positional_encoding(length: int, dim: int) -> Array:
    """Transformer sin/cos encoding of positions 0..length-1: PE[p, 2i] = sin(p·ω_i), PE[p, 2i+1] = cos(p·ω_i),
    ω_i = 10000^{-2i/dim}. Returns [length, dim] float32."""
    if dim % 2:
        raise ValueError(f"GPO positional encoding needs an even dim, got dim={dim}")
    position = jnp.arange(length, dtype=jnp.float32)[:, None]
    omega = jnp.exp(jnp.arange(0, dim, 2, dtype=jnp.float32) * -(math.log(10000.0) / dim))
    pe = jnp.zeros((length, dim), jnp.float32)
    pe = pe.at[:, 0::2].set(jnp.sin(position * omega))
    return pe.at[:, 1::2].set(jnp.cos(position * omega))


def sort_valid_descending(features: Array, mask: Array) -> tuple[Array, Array]:
    """Sort each dimension of the valid features of every sample in descending order.

    features [B, N, D], mask [B, N] (any pattern, need not be a prefix). Returns (sorted [B, N, D], sorted_mask [B, N])
    where the n valid values fill positions 0..n-1 and positions ≥ n are exactly zero.
    """
    valid = mask.astype(bool)
    lowest = jnp.finfo(features.dtype).min  # finite: padded values sort last without ±inf
    ascending = jnp.sort(jnp.where(valid[..., None], features, lowest), axis=1)
    num_valid = jnp.sum(valid, axis=1, keepdims=True)
    sorted_mask = jnp.arange(features.shape[1])[None, :] < num_valid
    return jnp.where(sorted_mask[..., None], jnp.flip(ascending, axis=1), 0.0), sorted_mask


class GPO(nn.Module):
    """VSE∞ GPO: learned order-statistic pooling. `__call__(features [B,N,D], mask [B,N] | None)` returns
    (pooled [B, D], weights [B, N]) where weights index sorted positions (weights[:, k] multiplies the k-th largest).

    Attributes: d_pe (32), d_hidden (32), temperature (0.1), pad_score (−10000, the reference's finite fill).
    """

    d_pe: int = 32
    d_hidden: int = 32
    temperature: float = 0.1
    pad_score: float = -10000.0

    @nn.compact
    def __call__(self, features: Array, mask: Array | None = None):
        if features.ndim != 3:
            raise ValueError(f"features must be [B, N, D], got shape {features.shape}")
        if mask is None:
            mask = jnp.ones(features.shape[:2], bool)
        elif mask.shape != features.shape[:2]:
            raise ValueError(f"mask must be [B, N] = {features.shape[:2]}, got shape {mask.shape}")
        sorted_features, sorted_mask = sort_valid_descending(features, mask)
        weights = self.pool_weights(sorted_mask)
        return jnp.einsum("bn,bnd->bd", weights.astype(features.dtype), sorted_features), weights

    def pool_weights(self, sorted_mask: Array) -> Array:
        """w [B, N] from the prefix mask of sorted positions; sums to 1 over positions, zero beyond n."""
        batch, length = sorted_mask.shape
        pe = jnp.where(sorted_mask[..., None], gpo_positional_encoding(length, self.d_pe)[None], 0.0)
        gru = nn.Bidirectional(
            nn.RNN(nn.GRUCell(self.d_hidden, parent=None), name="gru_forward"),
            nn.RNN(nn.GRUCell(self.d_hidden, parent=None), name="gru_backward"),
            merge_fn=lambda fwd, bwd: (fwd + bwd) / 2, name="gru")
        hidden = gru(pe, seq_lengths=jnp.sum(sorted_mask, axis=1).astype(jnp.int32))
        scores = nn.Dense(1, use_bias=False, name="linear")(hidden)[..., 0].astype(jnp.float32)
        scores = jnp.where(sorted_mask, scores, self.pad_score)
        return jax.nn.softmax(scores / self.temperature, axis=1)
