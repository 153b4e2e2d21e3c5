"""CLIP (ViT image tower + causal text tower) in Flax linen, parameter-compatible with Hugging Face `CLIPModel`.

Outputs are the taps Flow-CLIP consumes (docs/design.md#flowclip-inputs), raw and un-normalised:

    image:  h = ViT(pixels);  global  = visual_projection(post_layernorm(h[:, 0]))
                              patches = visual_projection(post_layernorm(h[:, 1:]))    # every token, CLS excluded
    text:   h = CausalTransformer(ids); s = final_layer_norm(h)
                              tokens  = text_projection(s)                             # all L positions
                              global  = tokens[eot],  eot = FIRST position whose id is the EOT id
                              valid   = positions 1 … eot−1                              # no SOT, EOT or padding

HF's vision `last_hidden_state` is not post-layernormed; here post_layernorm is applied to every token, which for
the CLS token reproduces HF's `image_embeds`. The first-EOT rule matters because HF's CLIP tokenizer pads with
`<|endoftext|>` (same id as EOT), so validity is never derived from "id ≠ pad".

Submodule names mirror the HF state dict (`vision_model.encoder.layers_N.self_attn.q_proj`, `pre_layrnorm` with HF's
spelling, …). Pixels are NHWC float (already resized and normalised with CLIP's mean/std; preprocessing is not part
of the model). Dropout is omitted: the towers are used frozen and CLIP checkpoints set attention_dropout = 0.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.models.activations import get_activation


def _fields_from(cls, config: Mapping[str, Any]) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in config.items() if k in names}


@dataclasses.dataclass(frozen=True)
class CLIPTextConfig:
    """HF `text_config` fields that define the forward pass (same names and defaults as transformers)."""

    vocab_size: int = 49408
    hidden_size: int = 512
    intermediate_size: int = 2048
    num_hidden_layers: int = 12
    num_attention_heads: int = 8
    max_position_embeddings: int = 77
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 1
    bos_token_id: int = 49406
    eos_token_id: int = 49407

    @property
    def eot_token_id(self) -> int:
        # Configs written before transformers PR #24773 carry eos_token_id = 2; HF then pools at argmax(input_ids),
        # i.e. the first occurrence of the largest id, which in CLIP's BPE vocabulary is EOT = vocab_size − 1.
        return self.vocab_size - 1 if self.eos_token_id == 2 else self.eos_token_id


@dataclasses.dataclass(frozen=True)
class CLIPVisionConfig:
    """HF `vision_config` fields that define the forward pass (same names and defaults as transformers)."""

    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_channels: int = 3
    image_size: int = 224
    patch_size: int = 32
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclasses.dataclass(frozen=True)
class CLIPConfig:
    text_config: CLIPTextConfig = CLIPTextConfig()
    vision_config: CLIPVisionConfig = CLIPVisionConfig()
    projection_dim: int = 512
    logit_scale_init_value: float = 2.6592  # log(1/0.07), HF default

    def __post_init__(self):
        for tower in (self.text_config, self.vision_config):
            if tower.hidden_size % tower.num_attention_heads:
                raise ValueError(f"hidden_size {tower.hidden_size} not divisible by num_attention_heads "
                                 f"{tower.num_attention_heads}")
            get_activation(tower.hidden_act)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "CLIPConfig":
        """Build from a parsed HF `config.json`; keys that do not affect the forward pass are ignored."""
        top = _fields_from(cls, config)
        top["text_config"] = CLIPTextConfig(**_fields_from(CLIPTextConfig, config.get("text_config") or {}))
        top["vision_config"] = CLIPVisionConfig(**_fields_from(CLIPVisionConfig, config.get("vision_config") or {}))
        return cls(**top)


def _layer_norm(eps: float, name: str) -> nn.LayerNorm:
    # use_fast_variance=False: E[(x−μ)²] like PyTorch (no E[x²]−μ² cancellation).
    return nn.LayerNorm(epsilon=eps, use_fast_variance=False, name=name)


class CLIPAttention(nn.Module):
    hidden_size: int
    num_heads: int

    @nn.compact
    def __call__(self, x, mask):
        """x [B, T, D]; mask bool [B, 1|T, T] (True = may attend) or None."""
        head_dim = self.hidden_size // self.num_heads

        def project(name):
            y = nn.Dense(self.hidden_size, name=name)(x)
            return y.reshape(*y.shape[:-1], self.num_heads, head_dim)

        q = project("q_proj") * head_dim ** -0.5
        k, v = project("k_proj"), project("v_proj")
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k)
        if mask is not None:
            # Most negative finite value (as HF), not -inf: a fully masked row stays finite.
            logits = jnp.where(mask[:, None], logits, jnp.finfo(logits.dtype).min)
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v)
        return nn.Dense(self.hidden_size, name="out_proj")(out.reshape(*out.shape[:-2], self.hidden_size))


class CLIPMLP(nn.Module):
    hidden_size: int
    intermediate_size: int
    hidden_act: str

    @nn.compact
    def __call__(self, x):
        x = get_activation(self.hidden_act)(nn.Dense(self.intermediate_size, name="fc1")(x))
        return nn.Dense(self.hidden_size, name="fc2")(x)


class CLIPEncoderLayer(nn.Module):
    """Pre-LayerNorm residual block: x += attn(LN₁ x); x += mlp(LN₂ x)."""

    config: CLIPTextConfig | CLIPVisionConfig

    @nn.compact
    def __call__(self, x, mask):
        c = self.config
        x = x + CLIPAttention(c.hidden_size, c.num_attention_heads, name="self_attn")(
            _layer_norm(c.layer_norm_eps, "layer_norm1")(x), mask)
        return x + CLIPMLP(c.hidden_size, c.intermediate_size, c.hidden_act, name="mlp")(
            _layer_norm(c.layer_norm_eps, "layer_norm2")(x))


class CLIPEncoder(nn.Module):
    config: CLIPTextConfig | CLIPVisionConfig

    @nn.compact
    def __call__(self, x, mask):
        for i in range(self.config.num_hidden_layers):
            x = CLIPEncoderLayer(self.config, name=f"layers_{i}")(x, mask)
        return x


class CLIPTextEmbeddings(nn.Module):
    config: CLIPTextConfig

    @nn.compact
    def __call__(self, input_ids):
        c = self.config
        seq_len = input_ids.shape[-1]
        if seq_len > c.max_position_embeddings:
            raise ValueError(f"sequence length {seq_len} > max_position_embeddings {c.max_position_embeddings}")
        tokens = nn.Embed(c.vocab_size, c.hidden_size, name="token_embedding")(input_ids)
        positions = nn.Embed(c.max_position_embeddings, c.hidden_size, name="position_embedding")(
            jnp.arange(seq_len))
        return tokens + positions[None]


class CLIPTextTransformer(nn.Module):
    """Causal text tower → final_layer_norm(h) for all positions [B, L, D_text]."""

    config: CLIPTextConfig

    @nn.compact
    def __call__(self, input_ids, attention_mask):
        seq_len = input_ids.shape[-1]
        causal = jnp.tril(jnp.ones((seq_len, seq_len), bool))
        mask = causal[None] & attention_mask.astype(bool)[:, None, :]
        x = CLIPTextEmbeddings(self.config, name="embeddings")(input_ids)
        x = CLIPEncoder(self.config, name="encoder")(x, mask)
        return _layer_norm(self.config.layer_norm_eps, "final_layer_norm")(x)


class CLIPVisionEmbeddings(nn.Module):
    config: CLIPVisionConfig

    @nn.compact
    def __call__(self, pixel_values):
        c = self.config
        b, h, w, ch = pixel_values.shape
        if (h, w, ch) != (c.image_size, c.image_size, c.num_channels):
            raise ValueError(f"pixel_values must be NHWC [B, {c.image_size}, {c.image_size}, {c.num_channels}] "
                             f"(no position-embedding interpolation); got {tuple(pixel_values.shape)}")
        patches = nn.Conv(c.hidden_size, (c.patch_size, c.patch_size), strides=(c.patch_size, c.patch_size),
                          padding="VALID", use_bias=False, name="patch_embedding")(pixel_values)
        patches = patches.reshape(b, -1, c.hidden_size)  # row-major over (row, col), as torch's flatten(2)
        cls = self.param("class_embedding", nn.initializers.normal(c.hidden_size ** -0.5), (c.hidden_size,))
        x = jnp.concatenate([jnp.broadcast_to(cls.astype(patches.dtype), (b, 1, c.hidden_size)), patches], axis=1)
        positions = nn.Embed(c.num_patches + 1, c.hidden_size, name="position_embedding")(
            jnp.arange(c.num_patches + 1))
        return x + positions[None]


class CLIPVisionTransformer(nn.Module):
    """ViT tower → post_layernorm applied to every token [B, 1 + N, D_vision] (CLS first)."""

    config: CLIPVisionConfig

    @nn.compact
    def __call__(self, pixel_values):
        eps = self.config.layer_norm_eps
        x = CLIPVisionEmbeddings(self.config, name="embeddings")(pixel_values)
        x = _layer_norm(eps, "pre_layrnorm")(x)  # sic: HF's parameter name
        x = CLIPEncoder(self.config, name="encoder")(x, None)
        return _layer_norm(eps, "post_layernorm")(x)


class CLIPModel(nn.Module):
    """Two-tower CLIP. `params["logit_scale"]` is the 0-d log of the logit scale (HF convention)."""

    config: CLIPConfig

    def setup(self):
        c = self.config
        self.text_model = CLIPTextTransformer(c.text_config)
        self.vision_model = CLIPVisionTransformer(c.vision_config)
        self.visual_projection = nn.Dense(c.projection_dim, use_bias=False)
        self.text_projection = nn.Dense(c.projection_dim, use_bias=False)
        self.logit_scale = self.param("logit_scale", nn.initializers.constant(c.logit_scale_init_value), ())

    def encode_image(self, pixel_values) -> dict[str, jax.Array]:
        """NHWC pixels → {"global": [B, d], "patches": [B, N, d]} (raw, un-normalised)."""
        states = self.visual_projection(self.vision_model(jnp.asarray(pixel_values)))
        return {"global": states[:, 0], "patches": states[:, 1:]}

    def encode_text(self, input_ids, attention_mask) -> dict[str, jax.Array]:
        """→ {"global": [B, d], "tokens": [B, L, d], "valid": bool [B, L]} (raw, un-normalised).

        Every row must contain the EOT id (tokenizers with truncation guarantee it); a row without one pools at
        position 0 and has no valid tokens.
        """
        input_ids = jnp.asarray(input_ids)
        tokens = self.text_projection(self.text_model(input_ids, jnp.asarray(attention_mask)))
        eot = jnp.argmax(input_ids == self.config.text_config.eot_token_id, axis=-1)  # argmax = FIRST match
        positions = jnp.arange(input_ids.shape[-1])[None]
        valid = (positions >= 1) & (positions < eot[:, None])
        global_ = jnp.take_along_axis(tokens, eot[:, None, None], axis=1)[:, 0]
        return {"global": global_, "tokens": tokens, "valid": valid}

    def __call__(self, pixel_values, input_ids, attention_mask) -> dict[str, Any]:
        """Both towers plus `logit_scale` = exp(params["logit_scale"]) (used for init and full forward passes)."""
        return {"image": self.encode_image(pixel_values), "text": self.encode_text(input_ids, attention_mask),
                "logit_scale": jnp.exp(self.logit_scale)}
