"""Every Flow-CLIP option (`config.flowclip.*`) in one frozen dataclass, with its one set of defaults.

The scorer (`score_pairs`, `icer_local_score`, `global_m_score`), the objective (`flowclip_objective`), the head
module (`mmjax.models.FlowCLIPHead`), the evaluation of a trained head and the configs (`configs/flowclip_*.py`)
all read their defaults from `DEFAULTS` below, so a default is written once (docs/design.md#project-defaults):

    scoring      alpha α (1.0), tau_p τ_p (0.02), pool ('logsumexp'), use_local (True; False = Global-M),
                 all_pairs ('gram' | 'direct' | 'reference'), score_chunk_images (0: from score_chunk_bytes),
                 score_chunk_bytes (32 MiB)
    head         logit_scale_init (1/0.07), logit_scale_max (100)
    objective    lambda_cimr (0.1 [paper]), cimr_kappa ('logit_scale' or a number), cimr_kappa_stop_grad (True),
                 mask_invalid_negatives (True), donor_tries (4)
    features     max_tokens (32 cached token positions)

Every value but λ_CIMR is a [default] of the project (docs/design.md#status).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

POOLS = ("logsumexp", "logmeanexp")
METHODS = ("gram", "direct", "reference")


@dataclasses.dataclass(frozen=True)
class FlowCLIPOptions:
    """The `flowclip.*` fields (module docstring). Frozen and hashable: a Flax module field and a static jit
    argument."""

    alpha: float = 1.0
    tau_p: float = 0.02
    pool: str = "logsumexp"
    use_local: bool = True
    all_pairs: str = "gram"
    score_chunk_images: int = 0
    score_chunk_bytes: int = 32 << 20
    logit_scale_init: float = 1 / 0.07
    logit_scale_max: float = 100.0
    lambda_cimr: float = 0.1
    cimr_kappa: Any = "logit_scale"
    cimr_kappa_stop_grad: bool = True
    mask_invalid_negatives: bool = True
    donor_tries: int = 4
    max_tokens: int = 32

    def __post_init__(self):
        if self.pool not in POOLS:
            raise ValueError(f"flowclip.pool must be one of {POOLS}; got {self.pool!r}")
        if self.all_pairs not in METHODS:
            raise ValueError(f"flowclip.all_pairs must be one of {METHODS}; got {self.all_pairs!r}")
        if isinstance(self.cimr_kappa, str) and self.cimr_kappa != "logit_scale":
            raise ValueError(f"flowclip.cimr_kappa must be 'logit_scale' or a number; got {self.cimr_kappa!r}")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None = None, **overrides) -> "FlowCLIPOptions":
        """From a dict / `ml_collections.ConfigDict` of `flowclip.*` fields (e.g. `config.flowclip`, or the
        `flowclip` entry of a head's export.json); keyword overrides win. Unknown names are refused, naming the
        known ones."""
        values = dict(config.items() if config is not None else ())
        values.update(overrides)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TypeError(f"unknown flowclip option(s) {unknown}; known: {sorted(names)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def score_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `mmjax.flowclip.score_pairs` these options set."""
        return {"alpha": self.alpha, "tau_p": self.tau_p, "pool": self.pool, "method": self.all_pairs,
                "chunk_size": self.score_chunk_images, "chunk_budget_bytes": self.score_chunk_bytes,
                "use_local": self.use_local}


DEFAULTS = FlowCLIPOptions()
