"""Masks, rectangular blocks and square padding for the assignment solvers.

A block C[n, m] with validity masks is padded to K = max(n, m) and turned into a square benefit matrix

    A_ij = C_ij      if cell (i, j) is valid (row i and column j valid, and the optional cell mask true)
         = 0         if row i and column j are both invalid / padding
         = −P_pad    otherwise

With r valid–valid pairs, n_V valid rows and n_T valid columns, a permutation has n_V + n_T − 2r penalised cells, so
each lost valid pair costs 2·P_pad while the valid total can gain at most (2m − 1)·c_max (c_max = max |C_valid|).
With P_pad > m·c_max every optimum therefore first maximises the number of valid–valid pairs, then their total.
`pad_penalty="auto"` uses P_pad = (2K + 1)·max(1, c_max): 2K + 1 for cosine inputs, as the spec fixes, and still
dominant for unnormalised scores. The penalty is finite: optax's Hungarian solver returns wrong matchings with ±inf.

Scale. A block whose largest valid |score| c_max lies outside [2⁻¹⁰, 2⁶⁴] is first multiplied by an exact power of
two f bringing c_max into [1, 2) (`mmjax.matching.scaling`; the optimum is unchanged): above 2⁶⁴ the penalty would
overflow float32 once |C| > 3.4e38/(2K + 1) (and with it every solver's totals), below 2⁻¹⁰ the penalty 2K + 1 would
dwarf the scores and the auction's certificate, relative to the span of the padded matrix, would accept any
matching. An explicit `pad_penalty` is multiplied by the same f. Blocks with c_max in [2⁻¹⁰, 2⁶⁴] (all ordinary
inputs) get f = 1 exactly: their benefit matrix is bit-for-bit what it was without rescaling.

Non-finite entries (NaN, ±inf) in valid cells make the whole problem invalid: its cells are replaced by 0 so the
solvers stay finite, the problem is reported in `aux["nonfinite_frac"]`, and every row of it comes back unmatched (−1).
"""

import jax
import jax.numpy as jnp

from mmjax.matching.scaling import pow2_factors


def normalise_masks(scores: jnp.ndarray, mask):
    """Returns (row_valid bool[..., n], col_valid bool[..., m], cell_valid bool[..., n, m]) broadcast to scores."""
    n, m = scores.shape[-2:]
    batch = scores.shape[:-2]
    if mask is None:
        row = jnp.ones(batch + (n,), bool)
        col = jnp.ones(batch + (m,), bool)
        return row, col, jnp.ones(scores.shape, bool)
    if isinstance(mask, (tuple, list)):
        if len(mask) != 2:
            raise ValueError(f"mask as a tuple must be (row_mask [..., {n}], col_mask [..., {m}]), "
                             f"got {len(mask)} items")
        row, col = (jnp.asarray(x).astype(bool) for x in mask)
        if row.shape[-1:] != (n,) or col.shape[-1:] != (m,):
            raise ValueError(f"mask: row_mask shape {row.shape} / col_mask shape {col.shape} do not end in "
                             f"({n},) / ({m},) for scores of shape {scores.shape}")
        try:
            row = jnp.broadcast_to(row, batch + (n,))
            col = jnp.broadcast_to(col, batch + (m,))
        except ValueError as e:
            raise ValueError(f"mask: row/col mask shapes {row.shape}/{col.shape} do not broadcast to scores batch "
                             f"shape {batch}") from e
        return row, col, row[..., :, None] & col[..., None, :]
    cell = jnp.asarray(mask).astype(bool)
    try:
        cell = jnp.broadcast_to(cell, scores.shape)
    except ValueError as e:
        raise ValueError(f"mask: cell mask of shape {cell.shape} does not broadcast to scores shape "
                         f"{scores.shape}") from e
    return jnp.any(cell, axis=-1), jnp.any(cell, axis=-2), cell


def square_benefit(scores: jnp.ndarray, row_valid, col_valid, cell_valid, pad_penalty="auto"):
    """Pads to K = max(n, m) (module docstring).

    Returns (A float32[..., K, K], cell_valid_sq bool[..., K, K], nonfinite bool[...], inv_scale float32[...]):
    A is the padded benefit of the block times f (a power of two, 1 for ordinary magnitudes) and inv_scale = 1/f,
    which turns quantities in A's units (the auction's gap) back into score units.
    """
    n, m = scores.shape[-2:]
    k = max(n, m)
    s = jax.lax.stop_gradient(scores).astype(jnp.float32)
    finite = jnp.isfinite(s)
    nonfinite = jnp.any(cell_valid & ~finite, axis=(-2, -1))
    s = jnp.where(cell_valid & finite, s, 0.0)
    scale, inv_scale = pow2_factors(jnp.max(jnp.abs(s), axis=(-2, -1)))
    s = s * scale[..., None, None]                        # × 1.0 (bit-for-bit s) unless c_max is far from 1
    pad_n, pad_m = k - n, k - m

    def pad(x, value):
        widths = [(0, 0)] * (x.ndim - 2) + [(0, pad_n), (0, pad_m)]
        return jnp.pad(x, widths, constant_values=value)

    s = pad(s, 0.0)
    cell = pad(cell_valid, False)
    row = jnp.pad(row_valid, [(0, 0)] * (row_valid.ndim - 1) + [(0, pad_n)], constant_values=False)
    col = jnp.pad(col_valid, [(0, 0)] * (col_valid.ndim - 1) + [(0, pad_m)], constant_values=False)
    if pad_penalty == "auto":
        c_max = jnp.max(jnp.abs(s), axis=(-2, -1), keepdims=True)
        penalty = (2 * k + 1) * jnp.maximum(1.0, c_max)
    else:
        penalty = jnp.float32(pad_penalty) * scale[..., None, None]
    both_invalid = ~row[..., :, None] & ~col[..., None, :]
    a = jnp.where(cell, s, jnp.where(both_invalid, 0.0, -penalty))
    return a, cell, nonfinite, inv_scale
