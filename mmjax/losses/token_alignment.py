"""Token-level alignment of a dual encoder's local tokens: late interaction (FILIP, Yao et al., ICLR 2022).

    (T1)  s_tok(I, T) = (1 / |V_T|) Σ_{ℓ ∈ V_T} max_{j ∈ R_I} ĥ_ℓᵀ p̂_j          (0 when V_T = ∅)

ĥ_ℓ: the caption's unit text tokens at its valid positions V_T (`encode_text`'s `valid`); p̂_j: the image's unit local
tokens (ViT patches or region outputs) at its valid slots R_I. The alignment loss is the symmetric multi-positive
InfoNCE of the CLIP objective over logit_scale · s_tok instead of logit_scale · cos(global):

    L = L_InfoNCE(scale · cos(v_I, t_T)) + λ_tok · L_InfoNCE(scale · s_tok)

so a caption scores high against an image only when each of its words finds a token of that image that answers it
— the gradient that makes a word's nearest image token lie on the object it names (word → token grounding,
`mmjax.evaluation.local_probes`), which the global loss alone never supplies. `clip_pretrain`'s `loss.token_align`
is λ_tok (default 0: the plain CLIP objective, bit for bit).

Departure from FILIP: only the text → image direction (T1). FILIP also averages, over the image's tokens, each
token's best word; ShapesWorld captions name only some of an image's objects, so that direction would pull the
unnamed objects' tokens towards some word of every true caption. FILIP's token dropping and its separate
temperatures are not used (one learned logit scale, as in the global term).

Masks stay finite: a padded image slot enters the max at −2 (below any cosine), a padded word is weighted 0.
Memory: one [Bi, Bt, L, N] float32 array per step (256 × 1280 × 16 × 10 for the region base at the CPU size:
≈ 210 MB).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mmjax.normalize import safe_normalize

_BELOW_ANY_COSINE = -2.0


def late_interaction_scores(image_tokens, text_tokens, text_valid, image_valid=None):
    """(T1) s_tok[i, t] for images' local tokens [Bi, N, d] and captions' tokens [Bt, L, d] with `text_valid`
    bool [Bt, L] and optional `image_valid` bool [Bi, N] (all valid when None); shape [Bi, Bt]."""
    image_tokens = jnp.asarray(image_tokens)
    text_tokens = jnp.asarray(text_tokens)
    if image_tokens.ndim != 3 or text_tokens.ndim != 3 or image_tokens.shape[-1] != text_tokens.shape[-1]:
        raise ValueError(f"image_tokens must be [Bi, N, d] and text_tokens [Bt, L, d] with one d; got "
                         f"{image_tokens.shape} and {text_tokens.shape}")
    if tuple(text_valid.shape) != tuple(text_tokens.shape[:2]):
        raise ValueError(f"text_valid must be [Bt, L] = {text_tokens.shape[:2]}; got {text_valid.shape}")
    if image_valid is not None and tuple(image_valid.shape) != tuple(image_tokens.shape[:2]):
        raise ValueError(f"image_valid must be [Bi, N] = {image_tokens.shape[:2]}; got {image_valid.shape}")
    p = safe_normalize(image_tokens.astype(jnp.float32))  # finite value and gradient for a zero row
    h = safe_normalize(text_tokens.astype(jnp.float32))
    cos = jnp.einsum("ind,tld->itln", p, h)  # [Bi, Bt, L, N]
    if image_valid is not None:
        cos = jnp.where(jnp.asarray(image_valid, bool)[:, None, None, :], cos, _BELOW_ANY_COSINE)
    best = jnp.max(cos, axis=-1)  # [Bi, Bt, L]: each word's best token of the image
    w = jnp.asarray(text_valid, jnp.float32)
    return jnp.einsum("itl,tl->it", best, w) / jnp.maximum(jnp.sum(w, axis=-1), 1.0)[None, :]


def token_alignment_scores(out: dict, image_valid=None) -> jax.Array:
    """(T1) over a CLIP forward pass's outputs (`{"image": {"patches"}, "text": {"tokens", "valid"}}`)."""
    return late_interaction_scores(out["image"]["patches"], out["text"]["tokens"], out["text"]["valid"], image_valid)
