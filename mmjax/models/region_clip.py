"""A CLIP whose image tower is a small transformer over region vectors (ShapesWorld's regions mode) — the region-token
base of the Flow-CLIP study (docs/design.md#shapesworld-presets `base_clip_regions`).

    x_r = W_in v_r  (valid region r),   x_r = e_pad  (padding slot)          v_r ∈ R^F: the region vector, which
    h   = Encoder([e_cls; x_1 … x_R], keys: CLS and valid regions only)        already carries its box
    image:  global = visual_projection(post_layernorm(h_cls)),  patches = visual_projection(post_layernorm(h_1…R))

The text tower, projections and logit scale are those of `mmjax.models.clip.CLIPModel` (same module names), so the
ShapesWorld CLIP task trains either base with the same loss and the Flow-CLIP heads read either one's features with
the same keys. Its local tokens are the per-region outputs, one per region slot (R of them); a padding slot gets the
learned pad embedding and attends like any token but is never attended to, so its output depends on the image only
through the tokens it reads.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.models.clip import CLIPConfig, CLIPEncoder, CLIPModel, CLIPTextTransformer, _layer_norm


class RegionTransformer(nn.Module):
    """Region tower → post_layernorm of every token [B, 1 + R, D] (CLS first)."""

    config: CLIPConfig

    @nn.compact
    def __call__(self, regions, region_mask):
        c = self.config.vision_config
        b, r, _ = regions.shape
        x = nn.Dense(c.hidden_size, name="region_embedding")(regions)
        pad = self.param("pad_embedding", nn.initializers.normal(c.hidden_size ** -0.5), (c.hidden_size,))
        x = jnp.where(region_mask[..., None], x, pad.astype(x.dtype))
        cls = self.param("class_embedding", nn.initializers.normal(c.hidden_size ** -0.5), (c.hidden_size,))
        x = jnp.concatenate([jnp.broadcast_to(cls.astype(x.dtype), (b, 1, c.hidden_size)), x], axis=1)
        keys = jnp.concatenate([jnp.ones((b, 1), bool), region_mask.astype(bool)], axis=1)
        x = _layer_norm(c.layer_norm_eps, "pre_layrnorm")(x)
        x = CLIPEncoder(c, name="encoder")(x, jnp.broadcast_to(keys[:, None, :], (b, 1 + r, 1 + r)))
        return _layer_norm(c.layer_norm_eps, "post_layernorm")(x)


class RegionCLIPModel(nn.Module):
    """`CLIPModel` with the region tower; `encode_image(regions [B, R, F], region_mask [B, R])`."""

    config: CLIPConfig

    def setup(self):
        c = self.config
        self.text_model = CLIPTextTransformer(c.text_config)
        self.vision_model = RegionTransformer(c)
        self.visual_projection = nn.Dense(c.projection_dim, use_bias=False)
        self.text_projection = nn.Dense(c.projection_dim, use_bias=False)
        self.logit_scale = self.param("logit_scale", nn.initializers.constant(c.logit_scale_init_value), ())

    def encode_image(self, regions, region_mask) -> dict[str, jax.Array]:
        """→ {"global": [B, d], "patches": [B, R, d]} (raw, un-normalised; one token per region slot)."""
        states = self.visual_projection(self.vision_model(jnp.asarray(regions), jnp.asarray(region_mask, bool)))
        return {"global": states[:, 0], "patches": states[:, 1:]}

    encode_text = CLIPModel.encode_text

    def __call__(self, regions, region_mask, input_ids, attention_mask):
        return {"image": self.encode_image(regions, region_mask), "text": self.encode_text(input_ids, attention_mask),
                "logit_scale": jnp.exp(self.logit_scale)}
