"""Maximum mean discrepancy between image and caption elements (Set Div / PVSE form).

    k(x, y) = exp(−γ ‖x − y‖₂)        (Euclidean distance, not squared; γ = 0.5)
    L_mmd   = mean_{x,x'} k(x, x') − 2 mean_{x,y} k(x, y) + mean_{y,y'} k(y, y')

Diagonal terms are included. ‖x − y‖ has an infinite derivative at 0 (the diagonal, and any collapsed pair), so
distances use sqrt(max(‖x − y‖², 1e-12)) and the exact diagonals are the constant 1 outside the gradient path.
"""

import jax.numpy as jnp


def _kernel(x, y, gamma, same):
    sq = jnp.sum(x * x, -1)[:, None] + jnp.sum(y * y, -1)[None, :] - 2.0 * (x @ y.T)
    k = jnp.exp(-gamma * jnp.sqrt(jnp.maximum(sq, 1e-12)))
    if same:
        k = jnp.where(jnp.eye(x.shape[0], dtype=bool), 1.0, k)
    return k


def _weighted_mean(k, wx, wy):
    w = wx[:, None] * wy[None, :]
    return jnp.sum(k * w) / jnp.maximum(jnp.sum(w), 1.0)


def mmd_loss(x, y, *, gamma: float = 0.5, x_mask=None, y_mask=None, pair_mean=None):
    """MMD between element sets x[N_x, D] and y[N_y, D] (module docstring); masks drop padded elements.
    `pair_mean(kernel, x, y, wx, wy, same=...)` computes each weighted kernel mean instead of one whole kernel matrix
    (`mmjax.sharded_similarity.AllPairsLayout.pair_mean`: sharded by rows, chunked over columns); None = whole."""
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"mmd_loss needs x [N_x, D] and y [N_y, D] with equal D, got {x.shape} and {y.shape}")
    wx = jnp.ones(x.shape[0]) if x_mask is None else jnp.asarray(x_mask, jnp.float32)
    wy = jnp.ones(y.shape[0]) if y_mask is None else jnp.asarray(y_mask, jnp.float32)
    if pair_mean is not None:
        kernel = lambda a, b: _kernel(a, b, gamma, False)  # noqa: E731 - the diagonal is pair_mean's (same=True)
        return (pair_mean(kernel, x, x, wx, wx, same=True) - 2.0 * pair_mean(kernel, x, y, wx, wy, same=False)
                + pair_mean(kernel, y, y, wy, wy, same=True))
    return (_weighted_mean(_kernel(x, x, gamma, True), wx, wx)
            - 2.0 * _weighted_mean(_kernel(x, y, gamma, False), wx, wy)
            + _weighted_mean(_kernel(y, y, gamma, True), wy, wy))
