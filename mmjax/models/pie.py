"""PVSE Polysemous Instance Embedding (PIE) head (Song & Soleymani, CVPR 2019), the MIL baseline's set head
(docs/design.md#pie-head, PVSE plug-in experiment).

    A        = softmax_tokens( W₂ tanh(W₁ x) )        [N × K], K attention heads (Lin et al. 2017 self-attention)
    r_k      = Dropout( σ( fc( Σ_t A_tk x_t ) ) )      residual k
    s_k      = normalise( LayerNorm(g + r_k) )         set element k

Padded tokens get a large finite negative score before the token softmax (the reference uses −inf).
Reference: `yalesong/pvse` `model.py` (`MultiHeadSelfAttention`, `PIENet`), also `kdwonn/DivE` `model_spm.py`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.models.set_prediction import check_set_head_inputs, layer_norm
from mmjax.normalize import unit_normalize

PAD_SCORE = -1e9  # finite; exp underflows to exactly 0 in float32 after max subtraction


def multi_head_token_attention(scores: jax.Array, token_mask: jax.Array | None) -> jax.Array:
    """A[b, t, k] = softmax over tokens t of scores[b, t, k]; padded tokens (mask 0) get weight 0. float32."""
    scores = scores.astype(jnp.float32)
    if token_mask is not None:
        scores = jnp.where(token_mask[..., None].astype(bool), scores, PAD_SCORE)
    return jax.nn.softmax(scores, axis=1)


class PIEHead(nn.Module):
    """PVSE PIE head with the same call signature as `SetPredictionModule`.

    Attributes: num_embeds (K), hidden_dim (d_h; None → d_in // 2 as in PVSE), dropout_rate (0.1; PVSE's
    `--dropout`). __call__(tokens [B,N,d_in], token_mask [B,N] | None, global_feat [B,D], deterministic=True) returns
    {'set': [B,K,D], 'residual': [B,K,D], 'global': normalise(g) [B,D], 'attention': A as [B,1,1,K,N]} (the singleton
    depth/head axes keep the layout of the SPM's attention maps).
    """

    num_embeds: int = 4
    hidden_dim: int | None = None
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, tokens, token_mask, global_feat, deterministic: bool = True):
        check_set_head_inputs(tokens, token_mask, global_feat)
        d_hidden = self.hidden_dim or tokens.shape[-1] // 2
        xavier = nn.initializers.xavier_uniform()
        scores = nn.Dense(self.num_embeds, use_bias=False, kernel_init=xavier, name="w2")(
            jnp.tanh(nn.Dense(d_hidden, use_bias=False, kernel_init=xavier, name="w1")(tokens)))
        attn = multi_head_token_attention(scores, token_mask)  # [B,N,K]
        pooled = jnp.einsum("bnk,bnd->bkd", attn.astype(tokens.dtype), tokens)
        residual = nn.sigmoid(nn.Dense(global_feat.shape[-1], kernel_init=xavier, name="fc")(pooled))
        residual = nn.Dropout(self.dropout_rate)(residual, deterministic=deterministic)
        elements = layer_norm("layer_norm")(global_feat[:, None, :] + residual)
        return {
            "set": unit_normalize(elements),
            "residual": residual,
            "global": unit_normalize(global_feat),
            "attention": jnp.swapaxes(attn, 1, 2)[:, None, None],
        }
