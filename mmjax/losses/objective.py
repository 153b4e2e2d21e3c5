"""The MaxMatch training objective and its baselines, assembled from a config.

    L = L_tri + λ_con L_con + λ_gd L_gd + λ_isd L_isd + λ_div L_div + λ_mmd L_mmd

S = `pairwise_set_similarity(image sets, caption sets, cfg.similarity)` (S_H for MaxMatch; smooth-Chamfer for Set Div,
MIL for PVSE, any kind with K = 1 for VSE∞); L_tri is the hardest-negative triplet (VSE0 all-negative form while
`warmup` is True — a static Python flag, so the trainer compiles one step function per phase, never one per step;
during the optional hard-negative ramp `warmup` is a traced weight w ∈ [0, 1] and L_tri = w·L_all + (1 − w)·L_max,
docs/design.md#vse0-warmup);
L_con the symmetric multi-positive InfoNCE over S/τ_con (with `score_units='cosine'`, both ranking losses see
g(S) = log(1 + s·S)/s instead of an exponential-family S — S_H, top-k, Sinkhorn with scale s = `s_h` > 0: the
log-mean-exp of the matched cosines, in cosine units and monotone in S, so the margin δ₁ and the temperature τ_con
mean the same as for a cosine-valued similarity; docs/design.md#score-units); Div, GD and ISD are summed over the two modalities
(`modality_reduce='sum'`, Set Div) or averaged (`'mean'`); MMD runs between all valid image and caption elements.
Terms whose weight is 0 are not computed.

`false_negatives='ignore'` keeps the pairs `ignore_pairs` marks (a caption true of another image of the batch than
its own: the data pipeline's `caption_true`, ShapesWorld) out of both ranking losses' negatives, warm-up and ramp
included; `'keep'` (default, the papers' recipe: positives are the source pairs only) treats them as negatives
(docs/design.md#false-negatives).

Model outputs per modality: a mapping with "set" [N, K, D] (unit rows), "residual" [N, K, D], "global" [N, D] (ĝ, the
normalised LN(global) added to every residual) and optionally "mask" [N, K].
"""

import functools

import jax.numpy as jnp
import ml_collections

from mmjax.losses.mmd import mmd_loss
from mmjax.losses.ranking import check_indices, infonce_loss, triplet_loss
from mmjax.losses.regularisers import div_gram, div_uniformity, gd_loss, isd_loss
from mmjax.sharded_similarity import AllPairsLayout


def maxmatch_loss_config() -> ml_collections.ConfigDict:
    """Project defaults (docs/design.md#project-defaults, docs/design.md#losses); every field is overridable."""
    return ml_collections.ConfigDict(dict(
        similarity="maxmatch",        # any mmjax.similarity kind
        s_h=1.0,                      # S_H exponential scale (0 = mean matched cosine)
        match_on="cos",               # 'cos' | 'transformed'
        solver="auto",                # mmjax.matching method for S_H
        alpha=16.0,                   # smooth-Chamfer temperature
        margin=0.2,                   # δ₁
        hard_negative="max",          # after warm-up
        warmup_epochs=1,              # VSE0 all-negative epochs before hard negatives (read by the trainer)
        warmup_reduction="mean",      # VSE0 warm-up: 'mean' (Set Div) | 'sum' (VSE∞)
        hard_negative_ramp_epochs=0.0,  # after warm-up, blend all → hardest negatives linearly over this many epochs
        reduction="mean",             # triplet after warm-up: 'mean' (Set Div, MaxMatch) | 'sum' (VSE∞)
        false_negatives="keep",       # 'keep' | 'ignore': in-batch captions true of another image (module docstring)
        lambda_con=0.5, con_temperature=0.05,
        score_units="native",         # 'native' | 'cosine': margin and temperature in cosine units for S_H scores
        lambda_gd=0.1, delta_gd=0.6,
        lambda_isd=0.1, delta_isd=0.5,
        gd_isd_shape="exp", gd_isd_scale=5.0,
        gd_target="final",            # 'final' | 'residual'
        isd_target="final",           # 'final' | 'residual'
        gd_stop_grad_global=False,
        lambda_div=0.01, div_type="uniformity",  # 'uniformity' (Set Div) | 'gram' (PVSE)
        lambda_mmd=0.01, mmd_gamma=0.5,
        modality_reduce="sum",        # 'sum' | 'mean'
    ))


SCORE_UNITS = ("native", "cosine")
FALSE_NEGATIVES = ("keep", "ignore")
EXPONENTIAL_KINDS = ("maxmatch", "maxmatch_topk", "sinkhorn_soft")  # kinds that average f_s(C) = (e^{sC} − 1)/s


def cosine_units(scores, kind: str, s_h: float):
    """g(S) = log(1 + s·S)/s for the kinds that average f_s of cosines (S_H, top-k, Sinkhorn; s = s_h > 0): the
    log-mean-exp of the cosines they average, in cosine units (g(f_s(c)) = c), monotone in S; identity otherwise.
    S ≥ (e^{−s} − 1)/s > −1/s keeps the argument of log1p above −1 for every real score; a large negative input is
    clamped there (it stays far below every real score, and finite). The NaN score of a pair with an empty set
    (`mmjax.similarity`) stays NaN."""
    if kind not in EXPONENTIAL_KINDS or s_h == 0:
        return scores
    return jnp.log1p(jnp.maximum(s_h * scores, -1.0 + 1e-6)) / s_h


def similarity_options(loss_cfg, matching_cfg=None) -> dict:
    """Keyword options of `pairwise_set_similarity` implied by a run's config — the one place they are derived.

    Training (`maxmatch_objective`), per-epoch validation and the final evaluators all score with these, so an
    override such as `--config.loss.s_h=2 --config.loss.solver=auction` changes every score of the run alike.
    `loss_cfg` gives s_h, match_on, solver and alpha; `matching_cfg` (`config.matching`: pad_penalty, auction.*,
    sinkhorn.*) the solver options (docs/design.md#assignment-solvers). Options a kind does not use are ignored.
    """
    base = maxmatch_loss_config()
    get = lambda k: loss_cfg.get(k, base[k]) if hasattr(loss_cfg, "get") else base[k]
    opts = {"s_h": float(get("s_h")), "match_on": get("match_on"), "solver": get("solver"),
            "alpha": float(get("alpha"))}
    if matching_cfg:
        m = matching_cfg.to_dict() if hasattr(matching_cfg, "to_dict") else dict(matching_cfg)
        opts["solver_options"] = {k: m[k] for k in ("pad_penalty", "auction") if k in m}
        sinkhorn = m.get("sinkhorn") or {}  # the entropic plan of the 'sinkhorn_soft' ablation
        opts.update({f"sinkhorn_{k}": sinkhorn[k] for k in ("tau", "iters") if k in sinkhorn})
    return opts


def _target(out, which, name):
    if which not in ("final", "residual"):
        raise ValueError(f"{name} must be 'final' or 'residual', got {which!r}")
    return out["set"] if which == "final" else out["residual"]


def maxmatch_objective(image, text, caption_image, cfg=None, *, warmup=False, image_ids=None,
                       image_valid=None, caption_valid=None, matching=None, all_pairs: AllPairsLayout | None = None,
                       ignore_pairs=None):
    """Total loss and per-term metrics. `image`/`text`: model outputs (module docstring); `matching`: the
    `config.matching` solver options (see `similarity_options`); `all_pairs`: how S is laid out over the mesh
    (`mmjax.sharded_similarity.AllPairsLayout`, from `config.sharding`; None = one block tensor). `warmup`: True
    (VSE0 all-negative triplet), False (hardest negative) or a traced scalar w ∈ [0, 1], the weight of the
    all-negative form during the ramp. `ignore_pairs`: bool [N_images, N_captions], required with
    `false_negatives='ignore'` and refused otherwise (module docstring).

    Concrete `caption_image` (host numpy, eager calls) must lie in [0, N_images): an out-of-range index raises
    ValueError before any scoring (a negative one would silently wrap to the last image). Under jit the indices are
    traced and cannot be checked (no cost is added to the jitted step): check them on the host."""
    check_indices(caption_image, image["set"].shape[0])
    base = maxmatch_loss_config()
    if cfg is not None:
        unknown = set(dict(cfg)) - set(base.keys())
        if unknown:
            raise ValueError(f"unknown loss config field(s) {sorted(unknown)}; known: {sorted(base.keys())}")
        base.update(dict(cfg))
    cfg = base
    if cfg.modality_reduce not in ("sum", "mean"):
        raise ValueError(f"modality_reduce must be 'sum' or 'mean', got {cfg.modality_reduce!r}")
    if cfg.div_type not in ("uniformity", "gram"):
        raise ValueError(f"div_type must be 'uniformity' or 'gram', got {cfg.div_type!r}")
    if cfg.score_units not in SCORE_UNITS:
        raise ValueError(f"score_units must be one of {SCORE_UNITS}, got {cfg.score_units!r}")
    if cfg.false_negatives not in FALSE_NEGATIVES:
        raise ValueError(f"false_negatives must be one of {FALSE_NEGATIVES}, got {cfg.false_negatives!r}")
    if (cfg.false_negatives == "ignore") != (ignore_pairs is not None):
        raise ValueError("loss.false_negatives='ignore' needs ignore_pairs (the batch's caption_true)"
                         if ignore_pairs is None else
                         "ignore_pairs was given but loss.false_negatives='keep' would treat those pairs as negatives")
    reduce = (lambda a, b: a + b) if cfg.modality_reduce == "sum" else (lambda a, b: 0.5 * (a + b))
    i_mask, t_mask = image.get("mask"), text.get("mask")

    layout = all_pairs or AllPairsLayout()
    scores = layout.score(image["set"], text["set"], cfg.similarity, i_mask, t_mask,
                          **similarity_options(cfg, matching))
    # per-caption vectors on every device: the losses' [B, M] masks then follow the score's rows
    caption_image, caption_valid = layout.replicate(caption_image), layout.replicate(caption_valid)
    if cfg.score_units == "cosine":
        scores = cosine_units(scores, cfg.similarity, cfg.s_h)
    valid = dict(image_ids=image_ids, image_valid=image_valid, caption_valid=caption_valid,
                 ignore_pairs=ignore_pairs)
    streamed = dict(anchor_hinge_sum=layout.anchor_hinge_sum) if layout.kind != "xla" else {}
    tri_all = functools.partial(triplet_loss, scores, caption_image, margin=cfg.margin, hard_negative="all",
                                reduction=cfg.warmup_reduction, **valid, **streamed)
    tri_hard = functools.partial(triplet_loss, scores, caption_image, margin=cfg.margin,
                                 hard_negative=cfg.hard_negative, reduction=cfg.reduction, **valid)
    if isinstance(warmup, bool):
        tri, parts = tri_all() if warmup else tri_hard()
        w = jnp.float32(warmup)
    else:  # the ramp: both forms on the same scores, blended by the traced weight
        (a, pa), (h, ph) = tri_all(), tri_hard()
        w = jnp.asarray(warmup, jnp.float32)
        tri = w * a + (1.0 - w) * h
        parts = {k: w * pa[k] + (1.0 - w) * ph[k] for k in pa}
    total = tri
    # Logged in every phase (the trainer averages each key over a logging window that may span two phases).
    metrics = {"loss/triplet": tri, "loss/triplet_i2t": parts["i2t"], "loss/triplet_t2i": parts["t2i"],
               "loss/all_negative_weight": w}
    if cfg.lambda_con:
        con, _ = infonce_loss(scores, caption_image, temperature=cfg.con_temperature, **valid)
        total += cfg.lambda_con * con
        metrics["loss/contrastive"] = con
    phi_kw = dict(shape=cfg.gd_isd_shape, scale=cfg.gd_isd_scale)
    if cfg.lambda_gd:
        gd = reduce(*(gd_loss(_target(o, cfg.gd_target, "gd_target"), o["global"], o.get("mask"),
                              delta=cfg.delta_gd, stop_grad_global=cfg.gd_stop_grad_global, **phi_kw)
                      for o in (image, text)))
        total += cfg.lambda_gd * gd
        metrics["loss/gd"] = gd
    if cfg.lambda_isd:
        isd = reduce(*(isd_loss(_target(o, cfg.isd_target, "isd_target"), o.get("mask"), delta=cfg.delta_isd,
                                **phi_kw) for o in (image, text)))
        total += cfg.lambda_isd * isd
        metrics["loss/isd"] = isd
    if cfg.lambda_div:
        div_fn = div_uniformity if cfg.div_type == "uniformity" else div_gram
        div = reduce(*(div_fn(o["residual"], o.get("mask")) for o in (image, text)))
        total += cfg.lambda_div * div
        metrics["loss/div"] = div
    if cfg.lambda_mmd:
        flat = lambda o: o["set"].reshape(-1, o["set"].shape[-1])
        fmask = lambda o: None if o.get("mask") is None else o["mask"].reshape(-1)
        pair_mean = None
        if all_pairs is not None and all_pairs.kind != "xla":  # sharded by rows, chunked by the layout's sets
            pair_mean = functools.partial(all_pairs.pair_mean, points_per_set=image["set"].shape[1])
        mmd = mmd_loss(flat(image), flat(text), gamma=cfg.mmd_gamma, x_mask=fmask(image), y_mask=fmask(text),
                       pair_mean=pair_mean)
        total += cfg.lambda_mmd * mmd
        metrics["loss/mmd"] = mmd
    metrics["loss/total"] = total
    return total, metrics
