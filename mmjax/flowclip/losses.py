"""Flow-CLIP training losses: HNB and CIMR (docs/design.md#flowclip-losses) [paper structure; reconstructed formulas].

A mini-batch holds B records (I_i, T_i⁺, T_i⁻, g_i); y_ij = 1[g_i = g_j]; u_ij^± = logit_scale · s(I_i, T_j^±).

HNB (hard-negative bidirectional multi-positive contrastive):

    L_I2T = −(1/B) Σ_i log[ Σ_j y_ij e^{u⁺_ij} / ( Σ_j e^{u⁺_ij} + Σ_j w_j e^{u⁻_ij} ) ]
    L_T2I = −(1/B) Σ_i log[ Σ_j y_ji e^{u⁺_ji} / Σ_j e^{u⁺_ji} ]
    L_HNB = ½ (L_I2T + L_T2I)

w_j = validity of T_j⁻ (invalid negatives leave the I2T denominator). With unique g and all w = 1 this is LABCLIP's
`constrastive_loss_with_negatives`.

CIMR (cross-image margin ranking), donor J_i = I_{donor[i]}:

    m_i(X) = s(X, T_i⁺) − s(X, T_i⁻)
    L_CIMR = (1/|E|) Σ_{i∈E} softplus(−κ [m_i(I_i) − m_i(J_i)]),   L_CIMR = 0 if E = ∅
    E = {i : w_i ∧ g_{donor[i]} ≠ g_i}

Masks are applied with `jnp.where` and a large finite penalty, never ±inf, so masked entries cannot influence
values or gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

MASK_PENALTY = -1e9  # finite stand-in for log 0 in masked logsumexp terms


def _masked_logsumexp(logits: jax.Array, keep: jax.Array, axis: int = -1) -> jax.Array:
    return jax.nn.logsumexp(jnp.where(keep, logits, MASK_PENALTY), axis=axis)


def _check_batch(pos_scores, neg_scores, image_ids, neg_valid) -> int:
    b = pos_scores.shape[0]
    if pos_scores.ndim != 2 or pos_scores.shape != (b, b):
        raise ValueError(f"pos_scores must be [B, B] = s(I_i, T_j⁺); got shape {pos_scores.shape}")
    if neg_scores.shape != (b, b):
        raise ValueError(f"neg_scores must have shape {(b, b)} like pos_scores; got {neg_scores.shape}")
    if image_ids.shape != (b,):
        raise ValueError(f"image_ids must have shape {(b,)}; got {image_ids.shape}")
    if neg_valid.shape != (b,):
        raise ValueError(f"neg_valid must have shape {(b,)}; got {neg_valid.shape}")
    if neg_valid.dtype != jnp.bool_:
        raise TypeError(f"neg_valid must be bool; got dtype {neg_valid.dtype}")
    return b


def same_identity(image_ids: jax.Array) -> jax.Array:
    """y[i, j] = 1[g_i = g_j], bool [B, B]."""
    return image_ids[:, None] == image_ids[None, :]


def hnb_loss(pos_scores, neg_scores, image_ids, neg_valid, logit_scale, *, return_parts: bool = False):
    """L_HNB (see module docstring). Scores are raw similarities; `logit_scale` = 1/τ_c multiplies them.

    Args:
      pos_scores: [B, B], pos_scores[i, j] = s(I_i, T_j⁺).
      neg_scores: [B, B], neg_scores[i, j] = s(I_i, T_j⁻).
      image_ids: int [B] image identities g (records of the same image are mutual positives).
      neg_valid: bool [B], w_j; pass all True to keep every negative (`flowclip.mask_invalid_negatives=False`).
      logit_scale: scalar 1/τ_c.
      return_parts: also return (L_I2T, L_T2I).
    """
    pos_scores, neg_scores = jnp.asarray(pos_scores, jnp.float32), jnp.asarray(neg_scores, jnp.float32)
    image_ids, neg_valid = jnp.asarray(image_ids), jnp.asarray(neg_valid)
    b = _check_batch(pos_scores, neg_scores, image_ids, neg_valid)
    y = same_identity(image_ids)
    u_pos, u_neg = logit_scale * pos_scores, logit_scale * neg_scores

    # I2T: row i, numerator over same-identity positives (always contains j = i), denominator over all B positives
    # and the valid negatives.
    numer = _masked_logsumexp(u_pos, y)
    denom_logits = jnp.concatenate([u_pos, u_neg], axis=1)
    denom_keep = jnp.concatenate([jnp.ones((b, b), bool), jnp.broadcast_to(neg_valid[None, :], (b, b))], axis=1)
    l_i2t = jnp.mean(_masked_logsumexp(denom_logits, denom_keep) - numer)
    # T2I: positive caption j is the query over the B images; y is symmetric.
    l_t2i = jnp.mean(jax.nn.logsumexp(u_pos, axis=0) - _masked_logsumexp(u_pos, y, axis=0))
    loss = 0.5 * (l_i2t + l_t2i)
    return (loss, (l_i2t, l_t2i)) if return_parts else loss


def cimr_eligible(image_ids, neg_valid, donor) -> jax.Array:
    """E: records with a valid negative and a donor of a different identity (bool [B])."""
    image_ids, donor = jnp.asarray(image_ids), jnp.asarray(donor)
    return jnp.asarray(neg_valid) & (image_ids[donor] != image_ids)


def cimr_loss(pos_scores, neg_scores, image_ids, neg_valid, donor, kappa, *, return_eligible: bool = False):
    """L_CIMR (see module docstring), gathered from the HNB score matrices: s(J_i, T_i^±) = S^±[donor[i], i].

    Args:
      pos_scores, neg_scores, image_ids, neg_valid: as in `hnb_loss`.
      donor: int [B], donor image row for each record (from `choose_donors`; a record whose donor shares its
        identity, e.g. donor[i] = i, is ineligible).
      kappa: scalar slope κ (project default: the logit scale under stop_gradient, applied by the caller).
      return_eligible: also return the eligibility mask E.
    """
    pos_scores, neg_scores = jnp.asarray(pos_scores, jnp.float32), jnp.asarray(neg_scores, jnp.float32)
    image_ids, neg_valid, donor = jnp.asarray(image_ids), jnp.asarray(neg_valid), jnp.asarray(donor)
    b = _check_batch(pos_scores, neg_scores, image_ids, neg_valid)
    if donor.shape != (b,) or not jnp.issubdtype(donor.dtype, jnp.integer):
        raise ValueError(f"donor must be an int array of shape {(b,)}; got {donor.dtype}{donor.shape}")
    rows = jnp.arange(b)
    margin_own = pos_scores[rows, rows] - neg_scores[rows, rows]
    margin_donor = pos_scores[donor, rows] - neg_scores[donor, rows]
    eligible = cimr_eligible(image_ids, neg_valid, donor)
    per_record = jax.nn.softplus(-kappa * (margin_own - margin_donor))
    total = jnp.sum(jnp.where(eligible, per_record, 0.0))
    loss = total / jnp.maximum(jnp.sum(eligible), 1)
    return (loss, eligible) if return_eligible else loss
