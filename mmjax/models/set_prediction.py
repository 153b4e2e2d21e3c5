"""Set prediction module (SPM) of Set Div (Kim et al., CVPR 2023), as used by MaxMatch
(docs/design.md#set-prediction-module).

K learned queries E₀ ∈ R^{K×D} attend to the local features X ∈ R^{N×d_in} of one sample through L pre-norm blocks

    E ← E + Attn( q = LN_q(E), k = LN_x(X) + PE, v = LN_x(X) )
    E ← E + FFN( LN_f(E) ),     FFN = Linear(D→mD) · GELU · Dropout · Linear(mD→D)

with *slot-competition* attention (softmax over the slot axis, then per-slot renormalisation over tokens). Then

    r   = LN_last(E_L)                    (residuals; input of the Div loss)
    ĝ   = normalise(LN_g(g))              (global term; target of the GD loss)
    s_k = normalise(LN_g(g) + r_k)        (set elements)

Reference: `kdwonn/DivE` `agg_block/attention.py` (`Attention.forward`), `agg_block/agg_block.py`, `model_spm.py`
(`SetPredictionModule`), flags of `train_eval_coco.sh` (`--spm_depth 4 --spm_weight_sharing --spm_last_ln
--spm_residual --spm_residual_norm`).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.normalize import unit_normalize

Array = jax.Array


def layer_norm(name: str) -> nn.LayerNorm:
    """LayerNorm with torch's defaults (eps 1e-5, variance as E[(x−μ)²])."""
    return nn.LayerNorm(epsilon=1e-5, use_fast_variance=False, name=name)


def sine_positional_encoding_1d(num_tokens: int, dim: int, temperature: float = 10000.0) -> Array:
    """1-D sine encoding of Set Div (`pos_encoding.py` `PositionEmbeddingSine1D(dim, normalize=True)`).

        p_j = 2π · j / (N + 1e-6),  j = 1..N
        PE[j, 2i] = sin(p_j / T^{2i/dim}),  PE[j, 2i+1] = cos(p_j / T^{2i/dim})

    N is the *padded* token count, as in the reference (its mask is all ones), so the encoding of a valid token depends
    on how far the batch is padded. Returns [N, dim] float32.
    """
    if dim % 2:
        raise ValueError(f"sine positional encoding needs an even dim, got dim={dim}")
    pos = jnp.arange(1, num_tokens + 1, dtype=jnp.float32) / (num_tokens + 1e-6) * (2 * math.pi)
    freq = temperature ** (2 * (jnp.arange(dim) // 2) / dim)
    angles = pos[:, None] / freq[None, :]
    return jnp.where(jnp.arange(dim) % 2 == 0, jnp.sin(angles), jnp.cos(angles)).astype(jnp.float32)


PAD_MODES = ("exclude", "reference")


def slot_competition_weights(logits: Array, token_mask: Array | None, eps: float = 1e-7,
                             pad_mode: str = "exclude") -> tuple[Array, Array]:
    """Slot-competition attention weights.

        A_kj = exp(ℓ_kj) / Σ_k' exp(ℓ_k'j)          softmax over the slot axis (slots compete for each token)
        A_kj ← A_kj · μ_j                           padded tokens get exactly zero weight (pad_mode 'exclude')
        Ā_kj = A_kj / (Σ_j A_kj + eps)              per-slot renormalisation over tokens

    logits: [..., K, N]; token_mask: [..., N] (1 = valid) or None. Computed in float32. Returns (A, Ā).
    pad_mode 'reference' (`model.spm.pad_mode`) reproduces Set Div: padded logits are filled with one constant before
    the slot softmax, so a padded token gets weight 1/K in every slot and enters the renormalisation; 'exclude'
    (default) zeroes it after the softmax (docs/design.md#set-prediction-module).
    """
    if pad_mode not in PAD_MODES:
        raise ValueError(f"pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
    logits = logits.astype(jnp.float32)
    if token_mask is not None and pad_mode == "reference":
        # Any constant gives the same result (every slot sees it); −max(ℓ) is what the reference writes.
        fill = -jnp.max(logits, axis=(-2, -1), keepdims=True)
        logits = jnp.where(token_mask[..., None, :].astype(bool), logits, fill)
    slot_probs = jax.nn.softmax(logits, axis=-2)
    if token_mask is not None and pad_mode == "exclude":
        slot_probs = slot_probs * token_mask[..., None, :].astype(jnp.float32)
    renormalised = slot_probs / (jnp.sum(slot_probs, axis=-1, keepdims=True) + eps)
    return slot_probs, renormalised


class SlotCompetitionAttention(nn.Module):
    """Multi-head cross-attention from K slots to N tokens with `slot_competition_weights`.

    q: D→h·d_h, k/v: d_in→h·d_h (no bias); ℓ = q·k/√d_h; heads concatenated → Linear(h·d_h→D) → Dropout.
    """

    num_heads: int = 4
    head_dim: int = 512
    dropout_rate: float = 0.1
    eps: float = 1e-7
    pad_mode: str = "exclude"

    @nn.compact
    def __call__(self, queries, keys, values, token_mask, deterministic: bool = True):
        inner = self.num_heads * self.head_dim
        split = lambda t: t.reshape(t.shape[:-1] + (self.num_heads, self.head_dim))
        q = split(nn.Dense(inner, use_bias=False, name="to_q")(queries))  # [B,K,h,dh]
        k = split(nn.Dense(inner, use_bias=False, name="to_k")(keys))  # [B,N,h,dh]
        v = split(nn.Dense(inner, use_bias=False, name="to_v")(values))
        logits = jnp.einsum("bkhd,bnhd->bhkn", q, k) / math.sqrt(self.head_dim)
        mask = None if token_mask is None else token_mask[:, None, :]
        slot_probs, weights = slot_competition_weights(logits, mask, self.eps, self.pad_mode)
        out = jnp.einsum("bhkn,bnhd->bkhd", weights.astype(v.dtype), v).reshape(queries.shape[:-1] + (inner,))
        out = nn.Dense(queries.shape[-1], name="to_out")(out)
        out = nn.Dropout(self.dropout_rate)(out, deterministic=deterministic)
        return out, slot_probs, weights


class FeedForward(nn.Module):
    """Linear(D→mD) · GELU (exact erf, as torch `nn.GELU`) · Dropout · Linear(mD→D)."""

    mult: int = 4
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        h = nn.gelu(nn.Dense(self.mult * x.shape[-1], name="fc1")(x), approximate=False)
        h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
        return nn.Dense(x.shape[-1], name="fc2")(h)


class SetPredictionBlock(nn.Module):
    """One pre-norm block: cross-attention (keys get PE, values do not) then FFN, both residual."""

    num_heads: int = 4
    head_dim: int = 512
    ff_mult: int = 4
    dropout_rate: float = 0.1
    eps: float = 1e-7
    pad_mode: str = "exclude"

    @nn.compact
    def __call__(self, slots, tokens, key_pos, token_mask, deterministic: bool = True):
        normed_tokens = layer_norm(name="ln_tokens")(tokens)
        keys = normed_tokens if key_pos is None else normed_tokens + key_pos
        attn = SlotCompetitionAttention(self.num_heads, self.head_dim, self.dropout_rate, self.eps, self.pad_mode,
                                        name="attn")
        update, slot_probs, weights = attn(
            layer_norm(name="ln_slots")(slots), keys, normed_tokens, token_mask, deterministic)
        slots = slots + update
        ffn = FeedForward(self.ff_mult, self.dropout_rate, name="ffn")
        slots = slots + ffn(layer_norm(name="ln_ffn")(slots), deterministic)
        return slots, slot_probs, weights


class SetPredictionModule(nn.Module):
    """Set Div set prediction module (docs/design.md#set-prediction-module). Defaults follow the official COCO script.

    Attributes:
      num_embeds: K, number of set elements (learned queries, init N(0, 1)).
      depth: L, number of blocks.
      share_weights: one block applied L times (`--spm_weight_sharing`) or L separate blocks.
      num_heads, head_dim: attention heads × head width (4 × 512 in Set Div; ShapesWorld preset 4 × 64).
      ff_mult: FFN expansion factor.
      dropout_rate: dropout after the FFN activation and after the attention output projection.
      pos_encoding: 'none' (regions, grids) or 'sine' (text; 1-D sine added to keys only).
      eps: renormalisation epsilon of the slot-competition attention.
      pad_mode: 'exclude' (padded tokens get zero attention) | 'reference' (Set Div; see
        `slot_competition_weights`).

    __call__(tokens [B,N,d_in], token_mask [B,N] | None, global_feat [B,D], deterministic=True) returns
      {'set': [B,K,D] unit rows, 'residual': r [B,K,D], 'global': ĝ [B,D] unit rows,
       'attention': Ā [B,L,h,K,N], 'slot_attention': A [B,L,h,K,N]}.
    Pass `rngs={'dropout': key}` when deterministic=False.
    """

    num_embeds: int = 4
    depth: int = 4
    share_weights: bool = True
    num_heads: int = 4
    head_dim: int = 512
    ff_mult: int = 4
    dropout_rate: float = 0.1
    pos_encoding: str = "none"
    eps: float = 1e-7
    pad_mode: str = "exclude"

    @nn.compact
    def __call__(self, tokens, token_mask, global_feat, deterministic: bool = True):
        check_set_head_inputs(tokens, token_mask, global_feat)
        if self.pos_encoding not in ("none", "sine"):
            raise ValueError(f"pos_encoding must be 'none' or 'sine', got {self.pos_encoding!r}")
        batch, num_tokens, d_in = tokens.shape
        dim = global_feat.shape[-1]
        key_pos = sine_positional_encoding_1d(num_tokens, d_in) if self.pos_encoding == "sine" else None

        queries = self.param("queries", nn.initializers.normal(1.0), (self.num_embeds, dim))
        slots = jnp.broadcast_to(queries, (batch, self.num_embeds, dim)).astype(tokens.dtype)
        block_kwargs = dict(num_heads=self.num_heads, head_dim=self.head_dim, ff_mult=self.ff_mult,
                            dropout_rate=self.dropout_rate, eps=self.eps, pad_mode=self.pad_mode)
        if self.share_weights:
            blocks = [SetPredictionBlock(**block_kwargs, name="block")] * self.depth
        else:
            blocks = [SetPredictionBlock(**block_kwargs, name=f"block_{i}") for i in range(self.depth)]
        slot_maps, maps = [], []
        for block in blocks:
            slots, slot_probs, weights = block(slots, tokens, key_pos, token_mask, deterministic)
            slot_maps.append(slot_probs)
            maps.append(weights)

        residual = layer_norm(name="ln_last")(slots)
        global_term = layer_norm(name="ln_global")(global_feat)
        return {
            "set": unit_normalize(global_term[:, None, :] + residual),
            "residual": residual,
            "global": unit_normalize(global_term),
            "attention": jnp.stack(maps, axis=1),
            "slot_attention": jnp.stack(slot_maps, axis=1),
        }


def check_set_head_inputs(tokens, token_mask, global_feat) -> None:
    """Shape checks shared by the set heads (SPM, PIE); raises ValueError naming the argument."""
    if tokens.ndim != 3:
        raise ValueError(f"tokens must be [B, N, d_in], got shape {tokens.shape}")
    if token_mask is not None and token_mask.shape != tokens.shape[:2]:
        raise ValueError(f"token_mask must be [B, N] = {tokens.shape[:2]}, got shape {token_mask.shape}")
    if global_feat.ndim != 2 or global_feat.shape[0] != tokens.shape[0]:
        raise ValueError(f"global_feat must be [B, D] with B = {tokens.shape[0]}, got shape {global_feat.shape}")
