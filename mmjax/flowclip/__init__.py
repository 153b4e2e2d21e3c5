"""Flow-CLIP math: Global-M and ICER scoring, all-pairs Gram form, HNB and CIMR losses, donors.

Public, stable API (external scripts import these names):

    init_params(d) -> {"M", "M_tok", "W"}                       M = M_tok = I, W = 0
    global_m_score(params, image, text) -> [Bi, Bt]             s_G
    icer_local_score(params, image, text, *, tau_p, pool, method, chunk_size) -> [Bi, Bt]    s_L
    score_pairs(params, image, text, *, alpha, tau_p, ..., return_local) -> [Bi, Bt]         s = s_G + α s_L
    score_pair_reference(params, image, text, *, alpha, tau_p) -> scalar    Algorithm 1 for one pair (oracle)
    hnb_loss(pos_scores, neg_scores, image_ids, neg_valid, logit_scale)
    cimr_loss(pos_scores, neg_scores, image_ids, neg_valid, donor, kappa)
    choose_donors(rng, image_ids) -> (donor, eligible)
    flowclip_objective(score_fn, logit_scale, batch, rng, options, **overrides) -> (loss, metrics)
    FlowCLIPOptions, DEFAULTS                                    every flowclip.* option and its one default
    validate_inputs(params, image, text)                         host-side shape/dtype/finiteness check

Inputs: image {"global": [Bi, d], "patches": [Bi, N, d]}, text {"global": [Bt, d], "tokens": [Bt, L, d],
"valid": bool[Bt, L]}; raw encoder outputs (normalised inside, in float32). Equations: see each module.
"""

from mmjax.flowclip.all_pairs import icer_local_score, score_pairs
from mmjax.flowclip.donors import DONOR_TAG, choose_donors
from mmjax.flowclip.losses import cimr_loss, hnb_loss
from mmjax.flowclip.objective import flowclip_objective
from mmjax.flowclip.options import DEFAULTS, FlowCLIPOptions
from mmjax.flowclip.scorer import global_m_score, init_params, score_pair_reference
from mmjax.flowclip.validation import validate_inputs

__all__ = [
    "DEFAULTS",
    "DONOR_TAG",
    "FlowCLIPOptions",
    "choose_donors",
    "cimr_loss",
    "flowclip_objective",
    "global_m_score",
    "hnb_loss",
    "icer_local_score",
    "init_params",
    "score_pair_reference",
    "score_pairs",
    "validate_inputs",
]
