"""Flow-CLIP head: the trainable parameters on top of a frozen CLIP, scored by the pure `mmjax.flowclip` scorer.

    s(I, T) = s_G(I, T) + α · s_L(I, T)          (docs/design.md#icer F1; math in `mmjax.flowclip.score_pairs`)
    params:  M, M_tok, W ∈ R^{d×d}  (init I, I, 0 ⇒ s = cos(v_I, t_T) at step 0)
             log_logit_scale θ      (init log(logit_scale_init)); logit scale 1/τ_c = exp(min(θ, log max))

The module only holds parameters; its options are one `mmjax.flowclip.FlowCLIPOptions` (`config.flowclip`). It
takes cached or freshly encoded features (`{"global", "patches"}` and `{"global", "tokens", "valid"}`, raw) and
returns the [Bi, Bt] score matrix — in training (`head_objective`: `flowclip_objective` on `apply(...,
return_local=True)` and the clipped logit scale) and in every evaluation alike. The logit scale is clipped in the
forward pass (no in-place clamp in a pure update), so above the cap its gradient is zero. `use_local=False` is Global-M (LABCLIP's head, M only); M_tok and W then exist but
receive no gradient.
"""

import math
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.flowclip import flowclip_objective, init_params, score_pairs
from mmjax.flowclip.options import DEFAULTS, FlowCLIPOptions


class FlowCLIPHead(nn.Module):
    """Parameters M, M_tok, W, log_logit_scale; `__call__(image, text) -> scores [Bi, Bt]`."""

    dim: int
    options: FlowCLIPOptions = DEFAULTS

    def setup(self):
        initial = init_params(self.dim)  # single source of truth for the paper's init (I, I, 0)
        self.M = self.param("M", lambda _, v=initial["M"]: v)
        self.M_tok = self.param("M_tok", lambda _, v=initial["M_tok"]: v)
        self.W = self.param("W", lambda _, v=initial["W"]: v)
        self.log_logit_scale = self.param(
            "log_logit_scale", nn.initializers.constant(math.log(self.options.logit_scale_init)), ())

    def logit_scale(self) -> jax.Array:
        """1/τ_c = exp(min(θ, log logit_scale_max))."""
        return jnp.exp(jnp.minimum(self.log_logit_scale, math.log(self.options.logit_scale_max)))

    def __call__(self, image: Mapping[str, Any], text: Mapping[str, Any], *, return_local: bool = False):
        """Scores [Bi, Bt]; with `return_local`, (scores, s_L) and s_L None for Global-M."""
        return score_pairs({"M": self.M, "M_tok": self.M_tok, "W": self.W}, image, text,
                           return_local=return_local, **self.options.score_kwargs())


def head_objective(head: FlowCLIPHead, params, batch, rng=None):
    """L_HNB + λ_CIMR · L_CIMR on the head's own scores and clipped logit scale: (loss, metrics).

    `mmjax.flowclip.flowclip_objective` with the head's `apply(..., return_local=True)` as score function and its
    options; the one loss of every head trainer (`mmjax.tasks.flowclip_head`, notebook 03, the mechanism oracle).
    """
    variables = {"params": params}
    scale = head.apply(variables, method="logit_scale")
    return flowclip_objective(lambda image, texts: head.apply(variables, image, texts, return_local=True), scale,
                              batch, rng, head.options)
