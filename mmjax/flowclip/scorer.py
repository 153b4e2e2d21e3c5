"""Flow-CLIP scoring math for one image–caption pair: Global-M and ICER (docs/design.md#global-m, docs/design.md#icer).

    (F1)  s(I,T) = s_G(I,T) + α · s_L(I,T),        s_G(I,T) = v̂ᵀ norm(M t̂)
    (F2)  q_ℓ = norm(M_tok ĥ_ℓ),   ℓ ∈ V_T
    (F3)  a_ℓj = q_ℓᵀ p̂_j;   e_ℓj = [a_ℓj − (1/N) Σ_k a_ℓk]_+
    (F4)  c_ℓ = (1/N) Σ_j e_ℓj p̂_j
    (F5)  r_ℓ = c_ℓ − (q_ℓᵀ c_ℓ) q_ℓ                    (tangent projection, q_ℓᵀ r_ℓ = 0)
    (F6)  q_ℓ^res = norm(q_ℓ + W r_ℓ)
    (F7)  𝒫_τ(q, P) = τ log Σ_j exp(qᵀ p̂_j / τ)
    (F8)  Δ_ℓ = 𝒫_τp(q_ℓ^res, P) − 𝒫_τp(q_ℓ, P)
    (F9)  s_L = (1/|V_T|) Σ_{ℓ∈V_T} Δ_ℓ,   s_L = 0 if V_T = ∅

`score_pair_reference` follows Algorithm 1 literally (boolean selection of V_T, explicit d-dimensional residual
queries) and is the oracle for the all-pairs forms in `all_pairs.py`. Every equation above is reconstructed
(docs/design.md#status) from the paper's prose (its equations are not public); the defaults of α, τ_p and the pool
are `mmjax.flowclip.options.DEFAULTS` ([default] config fields).
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.flowclip import validation
from mmjax.flowclip.options import DEFAULTS, POOLS
# re-exported: all_pairs, tests and notebooks use scorer.safe_normalize
from mmjax.normalize import safe_normalize  # noqa: F401


def init_params(d: int, dtype=jnp.float32) -> dict[str, jax.Array]:
    """Head parameters at the paper's init: M = M_tok = I, W = 0, so s(I,T) = cos(v_I, t_T) at step 0."""
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be a positive integer; got {d!r}")
    eye = jnp.eye(int(d), dtype=dtype)
    return {"M": eye, "M_tok": eye, "W": jnp.zeros((int(d), int(d)), dtype)}


def smooth_max_pool(logits_times_tau: jax.Array, tau_p, *, pool: str = DEFAULTS.pool, axis: int = -1) -> jax.Array:
    """(F7) 𝒫_τ over `axis` of responses x: τ·logsumexp(x/τ) (`'logsumexp'`), or minus τ·log N (`'logmeanexp'`).

    The two differ by the constant τ log N, which cancels in Δ (both pools see the same N).
    """
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}; got {pool!r}")
    out = tau_p * jax.nn.logsumexp(logits_times_tau / tau_p, axis=axis)
    if pool == "logmeanexp":
        out = out - tau_p * jnp.log(float(logits_times_tau.shape[axis]))
    return out


def transformed_text_global(params: Mapping[str, Any], text_global: jax.Array) -> jax.Array:
    """norm(M t̂) for every caption, rows of text_global [..., d]."""
    t_hat = safe_normalize(text_global.astype(jnp.float32))
    return safe_normalize(t_hat @ params["M"].T)


def global_m_score(params: Mapping[str, Any], image: Mapping[str, Any], text: Mapping[str, Any]) -> jax.Array:
    """Global-M for all pairs: s_G[i, t] = v̂_iᵀ norm(M t̂_t), shape [Bi, Bt]. Only 'global' entries are used."""
    validation.check_shapes(params, image, text, use_local=False)
    v_hat = safe_normalize(image["global"].astype(jnp.float32))
    return v_hat @ transformed_text_global(params, text["global"]).T


def token_queries(params: Mapping[str, Any], tokens: jax.Array, valid: jax.Array | None = None) -> jax.Array:
    """(F2) q_ℓ = norm(M_tok ĥ_ℓ) for tokens [..., L, d]; depends on the caption only, never on the image.

    Rows outside `valid` are replaced by the fixed unit vector e_0 *before* normalising, so padding (often all
    zeros) can influence neither values nor gradients; callers mask those rows out of (F9).
    """
    h = tokens.astype(jnp.float32)
    if valid is not None:
        filler = jnp.zeros((h.shape[-1],), h.dtype).at[0].set(1.0)
        h = jnp.where(valid[..., None], h, filler)
    return safe_normalize(safe_normalize(h) @ params["M_tok"].T)


def positive_centered_weights(a: jax.Array) -> jax.Array:
    """(F3) e_ℓj = [a_ℓj − mean_j a_ℓj]_+ over the last (patch) axis; invariant to a common offset of a_ℓ·."""
    return jax.nn.relu(a - jnp.mean(a, axis=-1, keepdims=True))


def icer_token_terms(
    params: Mapping[str, Any], patches_hat: jax.Array, queries: jax.Array, *, tau_p, pool: str = DEFAULTS.pool
) -> dict[str, jax.Array]:
    """Algorithm 1 for one image (P̂ [N, d], unit rows) and token queries Q [L, d]; every intermediate by name.

    Returns q, a, e, c, r, q_res ([L, ·] arrays), rho, rho_res and delta ([L]). Straight-line d-dimensional form;
    used by the reference scorer and by property tests.
    """
    n = patches_hat.shape[0]
    a = queries @ patches_hat.T  # (F3)
    e = positive_centered_weights(a)
    c = (e @ patches_hat) / n  # (F4): 1/N, weights deliberately not renormalised
    r = c - jnp.sum(c * queries, axis=-1, keepdims=True) * queries  # (F5)
    q_res = safe_normalize(queries + r @ params["W"].T)  # (F6)
    rho = smooth_max_pool(a, tau_p, pool=pool)  # (F7)-(F8)
    rho_res = smooth_max_pool(q_res @ patches_hat.T, tau_p, pool=pool)
    return {"q": queries, "a": a, "e": e, "c": c, "r": r, "q_res": q_res, "rho": rho, "rho_res": rho_res,
            "delta": rho_res - rho}


def score_pair_reference(
    params: Mapping[str, Any],
    image: Mapping[str, Any],
    text: Mapping[str, Any],
    *,
    alpha=DEFAULTS.alpha,
    tau_p=DEFAULTS.tau_p,
    pool: str = DEFAULTS.pool,
) -> jax.Array:
    """Algorithm 1, literally, for ONE pair: image {"global": [d], "patches": [N, d]}, text {"global": [d],
    "tokens": [L, d], "valid": bool[L]}. Returns the scalar s(I, T) (F1).

        g  = v̂ · norm(M t̂);   Q = norm(Ĥ[V_T] M_tokᵀ)
        A  = Q P̂ᵀ;  E = relu(A − mean_j A);  C = E P̂ / N;  R = C − rowdot(C, Q) Q
        Qr = norm(Q + R Wᵀ);  Δ = τp·LSE_j(Qr P̂ᵀ/τp) − τp·LSE_j(A/τp)
        s  = g + α · (mean(Δ) if |V_T| > 0 else 0)

    V_T is selected with a boolean index, so `text["valid"]` must be concrete (this oracle is not jittable over
    the mask; differentiating w.r.t. params or features works).
    """
    batched_image = {"global": image["global"][None], "patches": image["patches"][None]}
    batched_text = {"global": text["global"][None], "tokens": text["tokens"][None], "valid": text["valid"][None]}
    validation.check_shapes(params, batched_image, batched_text)
    try:
        valid = np.asarray(text["valid"], dtype=bool)
    except jax.errors.TracerArrayConversionError as err:
        raise TypeError("score_pair_reference needs a concrete text['valid'] (boolean selection of V_T)") from err

    g = safe_normalize(image["global"].astype(jnp.float32)) @ transformed_text_global(params, text["global"])
    if not valid.any():
        return g  # empty V_T contributes zero (F9)
    patches_hat = safe_normalize(image["patches"].astype(jnp.float32))
    queries = token_queries(params, text["tokens"][valid])
    terms = icer_token_terms(params, patches_hat, queries, tau_p=tau_p, pool=pool)
    return g + alpha * jnp.mean(terms["delta"])
