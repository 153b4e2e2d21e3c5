"""BERT encoder in Flax linen, parameter-compatible with Hugging Face `BertModel`.

Post-LayerNorm transformer (Devlin et al. 2019) as implemented by `transformers.BertModel`:

    x₀ = LN(E_word[ids] + E_pos[0..T−1] + E_type[type_ids])
    a  = LN(x + Dense_o(MHA(x; key padding mask)))          # attention.self / attention.output
    x' = LN(a + Dense_out(act(Dense_int(a))))               # intermediate / output

Submodule names mirror the HF state-dict names (`embeddings.word_embeddings`, `encoder.layer_N.attention.self.query`,
…) so `mmjax.models.hf` converts a checkpoint by renaming `layer.N` → `layer_N` and transposing Linear weights.
Only `last_hidden_state` is produced: the NSP pooler (`pooler.*`) is not part of this module (MaxMatch projects token
states itself, sentence-transformers mean-pools them).
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.models.activations import get_activation


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The fields of a Hugging Face BERT `config.json` that define the forward pass (same names)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by num_attention_heads "
                             f"{self.num_attention_heads}")
        if self.position_embedding_type != "absolute":
            raise NotImplementedError(f"position_embedding_type {self.position_embedding_type!r}: only 'absolute'")
        get_activation(self.hidden_act)  # fail at construction, not at first call

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "BertConfig":
        """Build from a parsed HF `config.json`; keys that do not affect the encoder forward pass are ignored."""
        if config.get("is_decoder") or config.get("add_cross_attention"):
            raise NotImplementedError("decoder / cross-attention BERT configs are not supported")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in config.items() if k in names})


def _layer_norm(config: BertConfig, name: str) -> nn.LayerNorm:
    # use_fast_variance=False: E[(x−μ)²] like PyTorch, not E[x²]−μ² (cancellation at float32 reference precision).
    return nn.LayerNorm(epsilon=config.layer_norm_eps, use_fast_variance=False, name=name)


class BertEmbeddings(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids, deterministic: bool):
        c = self.config
        seq_len = input_ids.shape[-1]
        if seq_len > c.max_position_embeddings:
            raise ValueError(f"sequence length {seq_len} > max_position_embeddings {c.max_position_embeddings}")
        words = nn.Embed(c.vocab_size, c.hidden_size, name="word_embeddings")(input_ids)
        positions = nn.Embed(c.max_position_embeddings, c.hidden_size, name="position_embeddings")(
            jnp.arange(seq_len))
        types = nn.Embed(c.type_vocab_size, c.hidden_size, name="token_type_embeddings")(token_type_ids)
        x = _layer_norm(c, "LayerNorm")(words + positions[None] + types)
        return nn.Dropout(c.hidden_dropout_prob)(x, deterministic=deterministic)


class BertSelfAttention(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, x, key_mask, deterministic: bool):
        c = self.config
        heads, head_dim = c.num_attention_heads, c.hidden_size // c.num_attention_heads

        def project(name):
            y = nn.Dense(c.hidden_size, name=name)(x)
            return y.reshape(*y.shape[:-1], heads, head_dim)

        q, k, v = project("query"), project("key"), project("value")
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(head_dim)).astype(x.dtype)
        # Masked keys get the most negative finite value (as HF does), never -inf: a fully padded row stays finite.
        logits = jnp.where(key_mask[:, None, None, :], logits, jnp.finfo(logits.dtype).min)
        weights = jax.nn.softmax(logits, axis=-1)
        weights = nn.Dropout(c.attention_probs_dropout_prob)(weights, deterministic=deterministic)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        return out.reshape(*out.shape[:-2], c.hidden_size)


class BertSelfOutput(nn.Module):
    """Projection + dropout + residual + LayerNorm; HF uses this shape for both `attention.output` and `output`."""

    config: BertConfig

    @nn.compact
    def __call__(self, y, residual, deterministic: bool):
        c = self.config
        y = nn.Dense(c.hidden_size, name="dense")(y)
        y = nn.Dropout(c.hidden_dropout_prob)(y, deterministic=deterministic)
        return _layer_norm(c, "LayerNorm")(y + residual)


class BertAttention(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, x, key_mask, deterministic: bool):
        y = BertSelfAttention(self.config, name="self")(x, key_mask, deterministic)
        return BertSelfOutput(self.config, name="output")(y, x, deterministic)


class BertIntermediate(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        return get_activation(c.hidden_act)(nn.Dense(c.intermediate_size, name="dense")(x))


class BertLayer(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, x, key_mask, deterministic: bool):
        a = BertAttention(self.config, name="attention")(x, key_mask, deterministic)
        h = BertIntermediate(self.config, name="intermediate")(a)
        return BertSelfOutput(self.config, name="output")(h, a, deterministic)


class BertEncoder(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, x, key_mask, deterministic: bool):
        for i in range(self.config.num_hidden_layers):
            x = BertLayer(self.config, name=f"layer_{i}")(x, key_mask, deterministic)
        return x


class BertModel(nn.Module):
    """HF-compatible BERT encoder: `(input_ids, attention_mask, token_type_ids=None) -> last_hidden_state [B, T, H]`.

    `attention_mask` is 1 (or True) for real tokens and 0 for padding; padded positions still get (meaningless)
    states, as in HF — pool with the mask. Dropout is active only with `deterministic=False` and a "dropout" rng.
    """

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids, attention_mask, token_type_ids=None, deterministic: bool = True):
        input_ids = jnp.asarray(input_ids)
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        key_mask = jnp.asarray(attention_mask).astype(bool)
        x = BertEmbeddings(self.config, name="embeddings")(input_ids, token_type_ids, deterministic)
        return BertEncoder(self.config, name="encoder")(x, key_mask, deterministic)
