"""All-pairs Flow-CLIP scores s[i, t] for Bi images × Bt captions (docs/design.md#flowclip-all-pairs).

Three interchangeable local-term implementations (they agree to float32 round-off; tests check it):

- `'reference'`: Algorithm 1 vmapped over pairs (materialises [Bi, Bt, L, d]; test oracle only).
- `'direct'`: per image U = P̂ Wᵀ (rows u_j = W p̂_j), per caption Z = Q Wᵀ (rows z_ℓ = W q_ℓ); then
      W r_ℓ = (1/N) Σ_j e_ℓj u_j − σ_ℓ z_ℓ,   σ_ℓ = q_ℓᵀ c_ℓ = (1/N) Σ_j e_ℓj a_ℓj
  with no d×d product per pair (activation [chunk, Bt, L, d]).
- `'gram'` (default): never forms q̃_ℓ = q_ℓ + W r_ℓ. Per image G = U P̂ᵀ and Ω = U Uᵀ (N×N); per caption
  κ_ℓ = q_ℓ·z_ℓ and ν_ℓ = ‖z_ℓ‖². One GEMM [Q; Z][P̂; U]ᵀ gives A = QP̂ᵀ, Ψ = ZP̂ᵀ, Γ = QUᵀ, Φ = ZUᵀ, and

      q̃_ℓ·p̂_k = A_ℓk + (1/N)(E G)_ℓk − σ_ℓ Ψ_ℓk
      ‖q̃_ℓ‖²  = 1 + 2[(1/N) Σ_j E_ℓj Γ_ℓj − σ_ℓ κ_ℓ] + (1/N²) e_ℓ Ω e_ℓᵀ − (2/N) σ_ℓ Σ_j E_ℓj Φ_ℓj + σ_ℓ² ν_ℓ
      ρ_ℓ^res  = 𝒫_τp( (q̃_ℓ·p̂_k) / ‖q̃_ℓ‖ )           (‖q̃‖² clamped at 1e-12)

  so storage per pair is O(L·N), memory grows as Bi·Bt·L·N rather than Bi·Bt·L·d.

The '1' in ‖q̃‖² uses ‖q_ℓ‖ = 1 (true up to round-off). Both forms hand (q̃·p̂ − a, ‖q̃‖² − 1) to `_pooled_delta`,
which makes W = 0 give Δ ≡ 0 bitwise (see there); ∂s/∂M_tok = 0 holds to float round-off.

Chunking: images are padded to a multiple of the chunk size C, mapped with `lax.map`, and each chunk is wrapped in
`jax.checkpoint`, so the backward pass recomputes a chunk instead of storing it. C is `chunk_size` when given
(`flowclip.score_chunk_images`), else chosen from a byte budget (`chunk_budget_bytes`, default 32 MiB) by
`chunk_for_budget`: a Gram chunk keeps ≈ 9 float32 tensors of shape [Bt, L, N] alive per image (XLA's buffer
assignment on CPU, 8.6–9.0 measured at B ∈ {64, 128}, N ∈ {49, 196}), so C = ⌊budget / (36·Bt·L·N)⌋ clamped to
[1, Bi] ('direct': d in place of N). A fixed budget makes the activation independent of Bt·N, where a fixed C grows
with both (docs/design.md#flowclip-all-pairs). Captions are not chunked: callers with very many captions
(retrieval) split them outside.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from mmjax.flowclip import validation
from mmjax.flowclip.options import DEFAULTS, METHODS, POOLS
from mmjax.flowclip.scorer import (
    global_m_score,
    icer_token_terms,
    positive_centered_weights,
    safe_normalize,
    token_queries,
)

_LIVE_PER_IMAGE = 9  # float32 [Bt, L, N] ('direct': [Bt, L, d]) tensors alive per image of a chunk


def chunk_for_budget(budget_bytes: int, n_images: int, n_captions: int, n_tokens: int, n_patches: int,
                     dim: int, method: str = "gram") -> int:
    """Images per chunk C = ⌊budget / (4·9·Bt·L·w)⌋ clamped to [1, Bi], w = N ('gram') or d ('direct', 'reference').

    Activation of one chunk ≈ C·9·Bt·L·w float32 (module docstring); the budget bounds it, not the inputs.
    """
    if not isinstance(budget_bytes, int) or budget_bytes < 1:
        raise ValueError(f"chunk_budget_bytes must be a positive int; got {budget_bytes!r}")
    width = n_patches if method == "gram" else dim
    per_image = 4 * _LIVE_PER_IMAGE * n_captions * n_tokens * width
    return int(max(1, min(n_images, budget_bytes // max(per_image, 1))))


def _pooled_delta(a: jax.Array, dot_extra: jax.Array, extra_sq: jax.Array, tau_p) -> jax.Array:
    """(F8) Δ = 𝒫(x) − 𝒫(a) for x = q̃·p̂ / ‖q̃‖, given q̃·p̂ = a + dot_extra and ‖q̃‖² = 1 + extra_sq.

    Written so that W = 0 (dot_extra = extra_sq = 0) gives Δ ≡ 0 bitwise in the forward pass, whatever order XLA
    reduces in (∂Δ/∂a cancels exactly in exact arithmetic; compiled gradients keep ~1e-8 round-off):
        x = a + δ,   δ = (dot_extra − a·(‖q̃‖ − 1)) / ‖q̃‖,   ‖q̃‖ − 1 = extra_sq / (1 + ‖q̃‖)
        Δ = (m_x − m_a) + τ log1p( Σ_k [e^{(x_k − m_x)/τ} − e^{(a_k − m_a)/τ}] / Σ_k e^{(a_k − m_a)/τ} )
    with m = max_k (stop-gradient shifts, as in logsumexp). δ = 0 makes every summand exactly 0. The pooling
    constant (log N for 'logmeanexp') cancels, so Δ does not depend on `flowclip.pool` here.
    """
    norm_sq_minus_one = jnp.maximum(extra_sq, 1e-12 - 1.0)  # clamps ‖q̃‖² ≥ 1e-12
    norm = jnp.sqrt(1.0 + norm_sq_minus_one)
    x = a + (dot_extra - a * (norm_sq_minus_one / (1.0 + norm))[..., None]) / norm[..., None]
    m_a = jax.lax.stop_gradient(jnp.max(a, axis=-1, keepdims=True))
    m_x = jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    exp_a = jnp.exp((a - m_a) / tau_p)
    exp_x = jnp.exp((x - m_x) / tau_p)
    ratio_minus_one = jnp.sum(exp_x - exp_a, axis=-1) / jnp.sum(exp_a, axis=-1)  # Σ exp_a ≥ 1
    return (m_x - m_a)[..., 0] + tau_p * jnp.log1p(ratio_minus_one)


def _gram_chunk_delta(w, patches_hat, queries, tau_p, pool):  # pool cancels in Δ (see _pooled_delta)
    """Δ[t, ℓ, c] for a chunk of images P̂ [C, N, d] against all queries Q [T, L, d] (Gram form)."""
    c_img, n, d = patches_hat.shape
    t_cap, l_tok, _ = queries.shape
    u = patches_hat @ w.T  # rows W p̂_j
    z = queries @ w.T  # rows W q_ℓ
    g = jnp.einsum("cjd,ckd->cjk", u, patches_hat)
    omega = jnp.einsum("cjd,ckd->cjk", u, u)
    kappa = jnp.sum(queries * z, axis=-1)[:, :, None]  # [T, L, 1]
    nu = jnp.sum(z * z, axis=-1)[:, :, None]
    # One large GEMM of the stacked caption rows against the stacked image rows.
    cap_rows = jnp.stack([queries, z], axis=1).reshape(t_cap * 2 * l_tok, d)
    img_rows = jnp.stack([patches_hat, u], axis=1).reshape(c_img * 2 * n, d)
    prod = (cap_rows @ img_rows.T).reshape(t_cap, 2, l_tok, c_img, 2, n)
    a, gamma = prod[:, 0, :, :, 0], prod[:, 0, :, :, 1]  # QP̂ᵀ, QUᵀ: [T, L, C, N]
    psi, phi = prod[:, 1, :, :, 0], prod[:, 1, :, :, 1]  # ZP̂ᵀ, ZUᵀ

    e = positive_centered_weights(a)
    sigma = jnp.sum(e * a, axis=-1) / n  # q_ℓᵀ c_ℓ, [T, L, C]
    dot_extra = jnp.einsum("tlcj,cjk->tlck", e, g) / n - sigma[..., None] * psi  # q̃·p̂ − a
    quad = jnp.sum(jnp.einsum("tlcj,cjk->tlck", e, omega) * e, axis=-1)
    extra_sq = (  # ‖q̃‖² − 1
        2.0 * (jnp.sum(e * gamma, axis=-1) / n - sigma * kappa)
        + quad / (n * n)
        - (2.0 / n) * sigma * jnp.sum(e * phi, axis=-1)
        + sigma * sigma * nu
    )
    return _pooled_delta(a, dot_extra, extra_sq, tau_p)


def _direct_chunk_delta(w, patches_hat, queries, tau_p, pool):  # pool cancels in Δ
    """Δ[t, ℓ, c] via W r_ℓ = (1/N) E U − σ Z (factorised form, activation [T, L, C, d])."""
    n = patches_hat.shape[1]
    u = patches_hat @ w.T
    z = queries @ w.T
    a = jnp.einsum("tld,cnd->tlcn", queries, patches_hat)
    e = positive_centered_weights(a)
    sigma = jnp.sum(e * a, axis=-1) / n
    w_r = jnp.einsum("tlcj,cjd->tlcd", e, u) / n - sigma[..., None] * z[:, :, None, :]
    dot_extra = jnp.einsum("tlcd,ckd->tlck", w_r, patches_hat)
    extra_sq = 2.0 * jnp.sum(queries[:, :, None, :] * w_r, axis=-1) + jnp.sum(w_r * w_r, axis=-1)
    return _pooled_delta(a, dot_extra, extra_sq, tau_p)


def _reference_chunk_delta(w, patches_hat, queries, tau_p, pool):
    """Δ[t, ℓ, c] by Algorithm 1 vmapped over (caption, image) pairs."""
    params = {"W": w}

    def one_pair(p_hat, q):
        return icer_token_terms(params, p_hat, q, tau_p=tau_p, pool=pool)["delta"]  # [L]

    per_image = jax.vmap(one_pair, in_axes=(0, None))  # [C, L]
    return jax.vmap(lambda q: per_image(patches_hat, q).T)(queries)  # [T, L, C]


_CHUNK_DELTA = {"gram": _gram_chunk_delta, "direct": _direct_chunk_delta, "reference": _reference_chunk_delta}


def icer_local_score(
    params: Mapping[str, Any],
    image: Mapping[str, Any],
    text: Mapping[str, Any],
    *,
    tau_p=DEFAULTS.tau_p,
    pool: str = DEFAULTS.pool,
    method: str = DEFAULTS.all_pairs,
    chunk_size: int | None = DEFAULTS.score_chunk_images,
    chunk_budget_bytes: int = DEFAULTS.score_chunk_bytes,
) -> jax.Array:
    """(F9) s_L[i, t] = mean over V_T of Δ_ℓ for every pair, shape [Bi, Bt]; 0 for captions with empty V_T; the
    empty [Bi, Bt] array when Bi = 0 or Bt = 0.

    Args (defaults: `mmjax.flowclip.options.DEFAULTS`, the project's [default] config fields):
      tau_p: pooling temperature τ_p (`flowclip.tau_p`).
      pool: `'logsumexp'` or `'logmeanexp'` (`flowclip.pool`; identical Δ).
      method: `'gram'` | `'direct'` | `'reference'` (`flowclip.all_pairs`).
      chunk_size: images per chunk (`flowclip.score_chunk_images`); need not divide Bi. None or 0: from the budget.
      chunk_budget_bytes: activation budget of one chunk when `chunk_size` is None (`chunk_for_budget`).
    """
    bi, _, _ = validation.check_shapes(params, image, text)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}; got {pool!r}")
    if chunk_size is None or chunk_size == 0:  # 0 is the config's "from the budget" (flowclip.score_chunk_images)
        bt, l_tok = text["tokens"].shape[:2]
        n_patches, dim = image["patches"].shape[1:]
        chunk = chunk_for_budget(chunk_budget_bytes, bi, bt, l_tok, n_patches, dim, method)
    elif not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, or 0 / None (from the budget); got {chunk_size!r}")
    else:
        chunk = min(chunk_size, bi)
    bt = text["tokens"].shape[0]
    if bi == 0 or bt == 0:  # no pairs: the empty [Bi, Bt] result (shapes are static, so also under jit)
        return jnp.zeros((bi, bt), jnp.float32)
    n_chunks = -(-bi // chunk)

    valid = text["valid"]
    queries = token_queries(params, text["tokens"], valid)  # [Bt, L, d], image-independent
    patches_hat = safe_normalize(image["patches"].astype(jnp.float32))
    pad = n_chunks * chunk - bi
    if pad:  # zero patches stay zero under safe_normalize: finite, and their rows are sliced away below
        patches_hat = jnp.concatenate([patches_hat, jnp.zeros((pad,) + patches_hat.shape[1:], patches_hat.dtype)])
    chunks = patches_hat.reshape((n_chunks, chunk) + patches_hat.shape[1:])

    chunk_delta = functools.partial(_CHUNK_DELTA[method], tau_p=tau_p, pool=pool)
    w = params["W"]
    count = jnp.sum(valid, axis=-1)  # |V_T|, [Bt]

    @jax.checkpoint
    def chunk_scores(p_chunk):
        delta = chunk_delta(w, p_chunk, queries)  # [Bt, L, C]
        summed = jnp.sum(jnp.where(valid[:, :, None], delta, 0.0), axis=1)  # [Bt, C]
        return (summed / jnp.maximum(count, 1)[:, None]).T  # [C, Bt]

    scores = jax.lax.map(chunk_scores, chunks)  # [n_chunks, C, Bt]
    return scores.reshape(n_chunks * chunk, -1)[:bi]


def score_pairs(
    params: Mapping[str, Any],
    image: Mapping[str, Any],
    text: Mapping[str, Any],
    *,
    alpha=DEFAULTS.alpha,
    tau_p=DEFAULTS.tau_p,
    pool: str = DEFAULTS.pool,
    method: str = DEFAULTS.all_pairs,
    chunk_size: int | None = DEFAULTS.score_chunk_images,
    chunk_budget_bytes: int = DEFAULTS.score_chunk_bytes,
    use_local: bool = DEFAULTS.use_local,
    return_local: bool = False,
):
    """(F1) s[i, t] = s_G[i, t] + α · s_L[i, t] for every image–caption pair, shape [Bi, Bt] (Bi = 0 or Bt = 0
    gives the empty [Bi, Bt] result).

    The one place F1 is assembled: training (`flowclip_objective`, through `mmjax.models.FlowCLIPHead`) and every
    evaluation score with it. Differentiable and jittable (`pool`, `method`, `chunk_size`, `chunk_budget_bytes`,
    `use_local`, `return_local` are static). `use_local=False` is Global-M (LABCLIP's head) and needs only the
    'global' entries. `return_local=True` returns (s, s_L), with s_L None for Global-M. Shapes are checked at
    trace time; run `validate_inputs` on host data to also reject non-finite features.
    """
    s_global = global_m_score(params, image, text)
    if not use_local:
        return (s_global, None) if return_local else s_global
    s_local = icer_local_score(params, image, text, tau_p=tau_p, pool=pool, method=method, chunk_size=chunk_size,
                               chunk_budget_bytes=chunk_budget_bytes)
    scores = s_global + alpha * s_local
    return (scores, s_local) if return_local else scores
