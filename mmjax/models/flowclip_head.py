"""Flow-CLIP head: the trainable parameters on top of a frozen CLIP, scored by the pure `mmjax.flowclip` scorer.

    s(I, T) = s_G(I, T) + α · s_L(I, T)          (docs/design.md#icer F1; math in `mmjax.flowclip.score_pairs`)
    params:  M, M_tok, W ∈ R^{d×d}  (init I, I, 0 ⇒ s = cos(v_I, t_T) at step 0)
             log_logit_scale θ      (init log(1/0.07)); logit scale 1/τ_c = exp(min(θ, log 100))

The module only holds parameters; it takes cached or freshly encoded features (`{"global", "patches"}` and
`{"global", "tokens", "valid"}`, raw) and returns the [Bi, Bt] score matrix. The logit scale is clipped in the
forward pass (no in-place clamp in a pure update), so above the cap its gradient is zero. `use_local=False` is
Global-M (LABCLIP's head, M only); M_tok and W then exist but receive no gradient.
"""

import math
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.flowclip import init_params, score_pairs
from mmjax.flowclip.all_pairs import DEFAULT_CHUNK_BUDGET_BYTES


class FlowCLIPHead(nn.Module):
    """Parameters M, M_tok, W, log_logit_scale; `__call__(image, text) -> scores [Bi, Bt]`."""

    dim: int
    alpha: float = 1.0                 # flowclip.alpha
    tau_p: float = 0.02                # flowclip.tau_p
    pool: str = "logsumexp"            # flowclip.pool
    method: str = "gram"               # flowclip.all_pairs
    chunk_size: int = 0                # flowclip.score_chunk_images (0: from the memory budget)
    chunk_budget_bytes: int = DEFAULT_CHUNK_BUDGET_BYTES  # flowclip.score_chunk_bytes
    use_local: bool = True             # False: Global-M
    logit_scale_init: float = 1 / 0.07  # flowclip.logit_scale_init
    logit_scale_max: float = 100.0     # flowclip.logit_scale_max

    def setup(self):
        initial = init_params(self.dim)  # single source of truth for the paper's init (I, I, 0)
        self.M = self.param("M", lambda _, v=initial["M"]: v)
        self.M_tok = self.param("M_tok", lambda _, v=initial["M_tok"]: v)
        self.W = self.param("W", lambda _, v=initial["W"]: v)
        self.log_logit_scale = self.param(
            "log_logit_scale", nn.initializers.constant(math.log(self.logit_scale_init)), ())

    def scorer_params(self) -> dict[str, jax.Array]:
        """{"M", "M_tok", "W"} as `mmjax.flowclip` functions take them."""
        return {"M": self.M, "M_tok": self.M_tok, "W": self.W}

    def logit_scale(self) -> jax.Array:
        """1/τ_c = exp(min(θ, log logit_scale_max))."""
        return jnp.exp(jnp.minimum(self.log_logit_scale, math.log(self.logit_scale_max)))

    def __call__(self, image: Mapping[str, Any], text: Mapping[str, Any]) -> jax.Array:
        return score_pairs(self.scorer_params(), image, text, alpha=self.alpha, tau_p=self.tau_p, pool=self.pool,
                           method=self.method, chunk_size=self.chunk_size,
                           chunk_budget_bytes=self.chunk_budget_bytes, use_local=self.use_local)
