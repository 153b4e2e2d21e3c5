"""What every MaxMatch tower returns, and the single-vector (VSE∞-style) configuration.

A tower maps one modality to a set of K unit vectors plus diagnostics:

    {'set': [B,K,D] unit rows, 'residual': [B,K,D] | None, 'global': ĝ [B,D] unit rows,
     'mask': [B,K] bool (all True: sets have fixed size K), 'attention': maps | None}

The set head (`SetPredictionModule`, `PIEHead`, or any module with their call signature) turns local tokens and a
global vector into the set. With no set head the tower is the single-vector baseline of VSE∞: K = 1 and
s₁ = ĝ = normalise(g); there is no residual (Div/GD/ISD losses do not apply).

Towers live in `image_towers.py` (region, grid) and `text_towers.py` (Bi-GRU, BERT, bag of words).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.normalize import unit_normalize


def apply_set_head(set_head: nn.Module | None, tokens: jax.Array, token_mask: jax.Array | None,
                   global_feat: jax.Array, deterministic: bool) -> dict:
    """Run `set_head` (or the single-vector fallback when it is None) and add the set mask."""
    if set_head is None:
        global_unit = unit_normalize(global_feat)
        out = {"set": global_unit[:, None, :], "residual": None, "global": global_unit, "attention": None}
    else:
        out = dict(set_head(tokens, token_mask, global_feat, deterministic=deterministic))
        out.setdefault("attention", None)
    out["mask"] = jnp.ones(out["set"].shape[:2], bool)
    return out


def check_tokens_and_mask(name: str, x: jax.Array, mask: jax.Array | None, ndim: int = 3) -> None:
    """Raise ValueError naming `name` unless x has `ndim` dims and mask (if given) matches its first two."""
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {x.shape}")
    if mask is not None and mask.shape != x.shape[:2]:
        raise ValueError(f"{name}_mask must be [B, N] = {x.shape[:2]}, got shape {mask.shape}")
