"""Set regularisers on [N, K, D] element or residual sets with an optional element mask [N, K].

Set Div uniformity on residuals ("Div", `div_type='uniformity'`), r̂ = r/‖r‖:

    L_div(sample) = (2/(K(K−1))) Σ_{j<k} exp(−2 ‖r̂_j − r̂_k‖²) = mean_{j<k} exp(−4 + 4 cos(r_j, r_k))

PVSE Gram diversity (`div_type='gram'`): L_div(sample) = ‖R̂R̂ᵀ − I‖_F / K²  (diagonal zeroed).

Global Discriminative (MaxMatch; shape reconstructed, docs/design.md#gd-loss) with φ(x) = exp(s·x) ('exp') or [x]_+
('hinge'):

    L_gd = (1/(N K)) Σ_n Σ_k φ( cos(s_{n,k}, ĝ_n) − δ_gd )

Intra-Set Divergence (docs/design.md#isd-loss), over ordered pairs j ≠ k:

    L_isd = (1/(N K(K−1))) Σ_n Σ_{j≠k} φ( cos(s_{n,j}, s_{n,k}) − δ_isd )

All averages run over valid elements/pairs only; samples with fewer than two valid elements contribute no pairs.
Normalisation uses max(‖x‖², 1e-12) so collapsed or zero inputs keep finite gradients.
"""

import jax
import jax.numpy as jnp

from mmjax.normalize import safe_normalize


def _unit(x):
    # Gradient-safe at zero rows: collapsed or zero residuals must not give NaN gradients.
    return safe_normalize(jnp.asarray(x, jnp.float32))


def _element_mask(x, mask, name):
    if x.ndim != 3:
        raise ValueError(f"{name} must be [N, K, D], got shape {x.shape}")
    if mask is None:
        return jnp.ones(x.shape[:2], bool)
    mask = jnp.asarray(mask, bool)
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask for {name} must have shape {x.shape[:2]}, got {mask.shape}")
    return mask


def _pair_mask(mask):
    k = mask.shape[-1]
    return mask[:, :, None] & mask[:, None, :] & ~jnp.eye(k, dtype=bool)


def _mean(x, w):
    return jnp.sum(jnp.where(w, x, 0.0)) / jnp.maximum(jnp.sum(w), 1)


def phi(x, shape: str, scale: float):
    if shape == "exp":
        return jnp.exp(scale * x)
    if shape == "hinge":
        return jax.nn.relu(x)
    raise ValueError(f"gd_isd_shape must be 'exp' or 'hinge', got {shape!r}")


def div_uniformity(residuals, mask=None):
    """Set Div uniformity, averaged over samples (module docstring)."""
    m = _element_mask(residuals, mask, "residuals")
    r = _unit(residuals)
    cos = jnp.einsum("njd,nkd->njk", r, r)
    pairs = _pair_mask(m)
    per_sample = jnp.sum(jnp.where(pairs, jnp.exp(-4.0 + 4.0 * cos), 0.0), (1, 2)) / jnp.maximum(
        jnp.sum(pairs, (1, 2)), 1)
    return _mean(per_sample, jnp.sum(pairs, (1, 2)) > 0)


def div_gram(residuals, mask=None):
    """PVSE Gram diversity ‖R̂R̂ᵀ − I‖_F / K², averaged over samples."""
    m = _element_mask(residuals, mask, "residuals")
    r = _unit(residuals)
    gram = jnp.where(_pair_mask(m), jnp.einsum("njd,nkd->njk", r, r), 0.0)
    frob_sq = jnp.sum(gram * gram, (1, 2))
    # sqrt(max(·, tiny)) keeps the gradient finite at orthonormal residuals (Frobenius norm 0).
    per_sample = jnp.sqrt(jnp.maximum(frob_sq, 1e-12)) / residuals.shape[1] ** 2
    return jnp.mean(per_sample)


def gd_loss(elements, global_embedding, mask=None, *, delta: float = 0.6, shape: str = "exp",
            scale: float = 5.0, stop_grad_global: bool = False):
    """Global Discriminative loss: pushes every element away from its own global reference ĝ."""
    m = _element_mask(elements, mask, "elements")
    if global_embedding.shape != (elements.shape[0], elements.shape[2]):
        raise ValueError(f"global_embedding must have shape {(elements.shape[0], elements.shape[2])}, "
                         f"got {global_embedding.shape}")
    g = _unit(global_embedding)
    if stop_grad_global:
        g = jax.lax.stop_gradient(g)
    cos = jnp.einsum("nkd,nd->nk", _unit(elements), g)
    return _mean(phi(cos - delta, shape, scale), m)


def isd_loss(elements, mask=None, *, delta: float = 0.5, shape: str = "exp", scale: float = 5.0):
    """Intra-Set Divergence: keeps the elements of one set apart (ordered pairs j ≠ k)."""
    m = _element_mask(elements, mask, "elements")
    s = _unit(elements)
    cos = jnp.einsum("njd,nkd->njk", s, s)
    return _mean(phi(cos - delta, shape, scale), _pair_mask(m))
