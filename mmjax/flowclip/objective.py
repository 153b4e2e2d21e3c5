"""The Flow-CLIP training objective (docs/design.md#flowclip-objective):

    L = L_HNB + λ_CIMR · L_CIMR,   λ_CIMR = 0.1 [paper]

over scores s = s_G + α s_L (F1, `mmjax.flowclip.score_pairs`) for all B images × (B positive + B negative)
captions, computed by the score function the caller passes (the head's own). Global-M (LABCLIP's head) is the same
objective on a head with `use_local=False` (s = s_G).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from mmjax.flowclip.donors import choose_donors, DONOR_TAG
from mmjax.flowclip.losses import cimr_loss, hnb_loss
from mmjax.flowclip.options import FlowCLIPOptions

# (image, texts) -> (s [B, T], s_L [B, T] or None): e.g. a `FlowCLIPHead` applied with `return_local=True`.
ScoreFn = Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[jax.Array, jax.Array | None]]


def _concat_texts(pos_text, neg_text):
    keys = ("global", "tokens", "valid") if "tokens" in pos_text else ("global",)
    for k in keys:
        if k not in neg_text or neg_text[k].shape[1:] != pos_text[k].shape[1:]:
            got = neg_text[k].shape if k in neg_text else "missing"
            raise ValueError(f"batch['neg_text']['{k}'] must match batch['pos_text']['{k}'] {pos_text[k].shape}; "
                             f"got {got}")
    return {k: jnp.concatenate([pos_text[k], neg_text[k]]) for k in keys}


def flowclip_objective(score_fn: ScoreFn, logit_scale, batch, rng=None, options=None, **overrides):
    """L_HNB + λ_CIMR · L_CIMR for one batch; returns (loss, metrics dict).

    Args:
      score_fn: (image, texts) -> (s [B, 2B], s_L or None): the head's own scores, so training and evaluation
        score through one function (`mmjax.models.FlowCLIPHead` with `return_local=True`, or
        `functools.partial(mmjax.flowclip.score_pairs, params, return_local=True)`). The captions are the B
        positives followed by the B negatives.
      logit_scale: scalar 1/τ_c, already clipped by the caller (exp(θ) ≤ `flowclip.logit_scale_max`).
      batch: {"image": {"global", "patches"}, "pos_text": text dict, "neg_text": text dict, "image_ids": int [B],
        "neg_valid": bool [B]}; text dicts as in `score_pairs`.
      rng: step key; donors use fold_in(rng, DONOR_TAG). Required when lambda_cimr != 0.
      options: a `FlowCLIPOptions` or a mapping of `flowclip.*` fields; keyword overrides win. The objective reads
        lambda_cimr, cimr_kappa, cimr_kappa_stop_grad, mask_invalid_negatives and donor_tries (the scoring
        options belong to `score_fn`).
    Metrics: hnb, hnb_i2t, hnb_t2i, logit_scale, neg_valid_frac, mean_abs_s_local (only when `score_fn` has a
    local branch), cimr and eligible_frac (when λ_CIMR ≠ 0), loss.
    """
    if isinstance(options, FlowCLIPOptions):
        cfg = dataclasses.replace(options, **overrides) if overrides else options
    else:
        cfg = FlowCLIPOptions.from_mapping(options, **overrides)
    image, image_ids, neg_valid = batch["image"], jnp.asarray(batch["image_ids"]), jnp.asarray(batch["neg_valid"])
    texts = _concat_texts(batch["pos_text"], batch["neg_text"])
    b = image["global"].shape[0]
    if batch["pos_text"]["global"].shape[0] != b:
        raise ValueError(f"batch['pos_text'] must hold B={b} captions (one per record); got "
                         f"{batch['pos_text']['global'].shape[0]}")

    scores, s_local = score_fn(image, texts)  # [B, 2B]
    if scores.shape != (b, 2 * b):
        raise ValueError(f"score_fn must return scores of shape (B, 2B) = {(b, 2 * b)}; got {scores.shape}")
    pos_scores, neg_scores = scores[:, :b], scores[:, b:]

    hnb_valid = neg_valid if cfg.mask_invalid_negatives else jnp.ones_like(neg_valid)
    hnb, (i2t, t2i) = hnb_loss(pos_scores, neg_scores, image_ids, hnb_valid, logit_scale, return_parts=True)
    metrics = {"hnb": hnb, "hnb_i2t": i2t, "hnb_t2i": t2i, "logit_scale": jnp.asarray(logit_scale, jnp.float32),
               "neg_valid_frac": jnp.mean(neg_valid.astype(jnp.float32))}
    if s_local is not None:
        metrics["mean_abs_s_local"] = jnp.mean(jnp.abs(s_local))
    loss = hnb
    if cfg.lambda_cimr != 0:
        if rng is None:
            raise ValueError("flowclip_objective needs rng when lambda_cimr != 0 (CIMR donors)")
        donor, _ = choose_donors(jax.random.fold_in(rng, DONOR_TAG), image_ids, tries=cfg.donor_tries)
        kappa = logit_scale if cfg.cimr_kappa == "logit_scale" else jnp.asarray(cfg.cimr_kappa, jnp.float32)
        if cfg.cimr_kappa_stop_grad:
            kappa = jax.lax.stop_gradient(kappa)
        cimr, eligible = cimr_loss(pos_scores, neg_scores, image_ids, neg_valid, donor, kappa, return_eligible=True)
        loss = loss + cfg.lambda_cimr * cimr
        metrics.update(cimr=cimr, eligible_frac=jnp.mean(eligible.astype(jnp.float32)))
    metrics["loss"] = loss
    return loss, metrics
