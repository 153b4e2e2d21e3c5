"""Entropic soft assignment (Sinkhorn), for smooth ablations only; never chosen by `'auto'`.

Log-domain iterations on one square, unmasked block A[K, K]:

    log P⁽⁰⁾ = A / τ
    repeat n_it times:  log P ← log P − LSE_j log P   (rows)
                        log P ← log P − LSE_i log P   (columns)
    P = exp(log P⁽ⁿⁱᵗ⁾)

The trip count is fixed (`lax.scan`), which vmaps efficiently. Columns sum to 1 exactly after the last half-step and
rows to 1 up to the convergence error; as τ → 0 the plan concentrates on the optimal permutation, so Σ P ⊙ A tends to
the assignment optimum.
"""

import jax
import jax.numpy as jnp


def sinkhorn_plan(benefit: jnp.ndarray, tau: float = 0.05, iters: int = 20) -> jnp.ndarray:
    """Doubly-stochastic plan float32[K, K] for one square block (maximising `benefit`)."""
    if benefit.ndim != 2 or benefit.shape[0] != benefit.shape[1]:
        raise ValueError(f"sinkhorn needs one square block [K, K], got shape {benefit.shape}")
    if tau <= 0:
        raise ValueError(f"sinkhorn tau must be > 0, got {tau}")
    log_p = benefit.astype(jnp.float32) / tau

    def step(log_p, _):
        log_p = log_p - jax.nn.logsumexp(log_p, axis=1, keepdims=True)
        log_p = log_p - jax.nn.logsumexp(log_p, axis=0, keepdims=True)
        return log_p, None

    log_p, _ = jax.lax.scan(step, log_p, None, length=iters)
    return jnp.exp(log_p)
