"""The Flow-CLIP training objective (docs/design.md#flowclip-objective):

    L = L_HNB + λ_CIMR · L_CIMR,   λ_CIMR = 0.1 [paper]

over scores s = s_G + α s_L for all B images × (B positive + B negative) captions. Global-M (LABCLIP's head) is the
same objective with `use_local=False` (s = s_G).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from mmjax.flowclip.all_pairs import DEFAULT_CHUNK_BUDGET_BYTES, METHODS, icer_local_score
from mmjax.flowclip.donors import DONOR_TAG, choose_donors
from mmjax.flowclip.losses import cimr_loss, hnb_loss
from mmjax.flowclip.scorer import POOLS, global_m_score


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    """Fields of the `flowclip.*` config read by the objective; defaults are the spec's project defaults.

    alpha: local-term weight α [default 1.0]. tau_p: pooling temperature [default 0.02]. pool: 'logsumexp' |
    'logmeanexp'. lambda_cimr: CIMR weight [paper 0.1]. cimr_kappa: 'logit_scale' (κ = 1/τ_c) or a float.
    cimr_kappa_stop_grad: stop_gradient on κ [default True]. mask_invalid_negatives: drop invalid negatives from the
    I2T denominator [default True]; CIMR always requires a valid negative. use_local: False → Global-M.
    donor_tries: cyclic derangements tried per step [default 4]. score_chunk_images: images per scorer chunk
    (0 [default]: chosen from `score_chunk_bytes`, a memory budget [default 32 MiB]; `all_pairs.chunk_for_budget`).
    all_pairs: 'gram' | 'direct' | 'reference'.
    """

    alpha: float = 1.0
    tau_p: float = 0.02
    pool: str = "logsumexp"
    lambda_cimr: float = 0.1
    cimr_kappa: Any = "logit_scale"
    cimr_kappa_stop_grad: bool = True
    mask_invalid_negatives: bool = True
    use_local: bool = True
    donor_tries: int = 4
    score_chunk_images: int = 0
    score_chunk_bytes: int = DEFAULT_CHUNK_BUDGET_BYTES
    all_pairs: str = "gram"

    def __post_init__(self):
        if self.pool not in POOLS:
            raise ValueError(f"flowclip.pool must be one of {POOLS}; got {self.pool!r}")
        if self.all_pairs not in METHODS:
            raise ValueError(f"flowclip.all_pairs must be one of {METHODS}; got {self.all_pairs!r}")
        if isinstance(self.cimr_kappa, str) and self.cimr_kappa != "logit_scale":
            raise ValueError(f"flowclip.cimr_kappa must be 'logit_scale' or a number; got {self.cimr_kappa!r}")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None = None, **overrides) -> "ObjectiveConfig":
        """Reads the known fields from a dict / `ml_collections.ConfigDict` (other `flowclip.*` fields, e.g.
        `logit_scale_init`, belong to other components and are ignored); keyword overrides must be known fields."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TypeError(f"unknown flowclip objective option(s) {unknown}; known: {sorted(names)}")
        values = {k: config[k] for k in names if config is not None and k in config}
        values.update(overrides)
        return cls(**values)


def _concat_texts(pos_text, neg_text):
    keys = ("global", "tokens", "valid") if "tokens" in pos_text else ("global",)
    for k in keys:
        if k not in neg_text or neg_text[k].shape[1:] != pos_text[k].shape[1:]:
            got = neg_text[k].shape if k in neg_text else "missing"
            raise ValueError(f"batch['neg_text']['{k}'] must match batch['pos_text']['{k}'] {pos_text[k].shape}; "
                             f"got {got}")
    return {k: jnp.concatenate([pos_text[k], neg_text[k]]) for k in keys}


def flowclip_objective(params, logit_scale, batch, rng=None, config=None, **overrides):
    """L_HNB + λ_CIMR · L_CIMR for one batch; returns (loss, metrics dict).

    Args:
      params: {"M", "M_tok", "W"} (only "M" when use_local=False).
      logit_scale: scalar 1/τ_c, already clipped by the caller (exp(θ) ≤ `flowclip.logit_scale_max`).
      batch: {"image": {"global", "patches"}, "pos_text": text dict, "neg_text": text dict, "image_ids": int [B],
        "neg_valid": bool [B]}; text dicts as in `score_pairs`.
      rng: step key; donors use fold_in(rng, DONOR_TAG). Required when lambda_cimr != 0.
      config: mapping with `flowclip.*` field names (see `ObjectiveConfig`); keyword overrides win.
    """
    cfg = ObjectiveConfig.from_mapping(config, **overrides)
    image, image_ids, neg_valid = batch["image"], jnp.asarray(batch["image_ids"]), jnp.asarray(batch["neg_valid"])
    texts = _concat_texts(batch["pos_text"], batch["neg_text"])
    b = image["global"].shape[0]
    if batch["pos_text"]["global"].shape[0] != b:
        raise ValueError(f"batch['pos_text'] must hold B={b} captions (one per record); got "
                         f"{batch['pos_text']['global'].shape[0]}")

    scores = global_m_score(params, image, texts)  # [B, 2B]
    mean_abs_local = jnp.zeros(())
    if cfg.use_local:
        s_local = icer_local_score(params, image, texts, tau_p=cfg.tau_p, pool=cfg.pool, method=cfg.all_pairs,
                                   chunk_size=cfg.score_chunk_images,
                                   chunk_budget_bytes=cfg.score_chunk_bytes)
        scores = scores + cfg.alpha * s_local
        mean_abs_local = jnp.mean(jnp.abs(s_local))
    pos_scores, neg_scores = scores[:, :b], scores[:, b:]

    hnb_valid = neg_valid if cfg.mask_invalid_negatives else jnp.ones_like(neg_valid)
    hnb, (i2t, t2i) = hnb_loss(pos_scores, neg_scores, image_ids, hnb_valid, logit_scale, return_parts=True)
    metrics = {"hnb": hnb, "hnb_i2t": i2t, "hnb_t2i": t2i, "logit_scale": jnp.asarray(logit_scale, jnp.float32),
               "neg_valid_frac": jnp.mean(neg_valid.astype(jnp.float32)), "mean_abs_s_local": mean_abs_local}
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
