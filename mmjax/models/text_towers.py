"""Text towers of MaxMatch / Set Div (docs/design.md#text-towers). Inputs: ids [B,T] int, mask [B,T] (1 = token).

Bi-GRU tower (`kdwonn/DivE` `model_spm.py` `EncoderText`, `--gpo_rnn --txt_attention_input wemb
--spm_txt_pos_enc_type sine`):

    e_t        = Dropout(Embed(w_t))                                   word embeddings (300-d, GloVe init)
    o_t, h_fin = BiGRU(e_1..e_n)   with  o_t = (o_t^→ + o_t^←)/2,  h_fin = (h^→_n + h^←_1)/2
    g          = Dropout(h_fin)   ('rnn' [default])   or   masked max_t Dropout(o_t)   ('max')
    set        = set_head(e, μ, g)                     SPM with sine PE on keys (d_in = word dim) | PIE | None

The mask must be a prefix (left-aligned tokens): the GRU runs over the first Σμ tokens (`seq_lengths`).

BERT tower (`EncoderTextBERT`): x_t = Linear(H→D)(BERT(ids, μ)_t); g = x_CLS ('cls' [default]) or masked max;
set = set_head(x, μ, g) (d_in = D). Any linen module with `bert(input_ids, attention_mask, deterministic=...)`
→ last hidden state [B,T,H] works (e.g. `mmjax.models.bert.BertModel`).

Bag-of-words tower [project, not from the papers]: x_t = Linear(E→D)(Embed(w_t)), g = masked max of x; set head over
the word embeddings. A cheap tower for benchmarks and smoke tests.

Word embeddings are initialised U(−0.1, 0.1) (the reference's no-GloVe init); load GloVe with
`mmjax.models.glove.read_glove` and `replace_word_embeddings(params, matrix)`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.models.pooling import masked_max
from mmjax.models.towers import apply_set_head, check_tokens_and_mask

WORD_EMBED_NAME = "word_embed"


def symmetric_uniform(scale: float = 0.1):
    """Initializer U(−scale, scale) (torch `weight.data.uniform_(-0.1, 0.1)`)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -scale, scale)

    return init


def _check_text(ids, mask):
    if ids.ndim != 2:
        raise ValueError(f"ids must be [B, T], got shape {ids.shape}")
    if mask is None or mask.shape != ids.shape:
        raise ValueError(f"mask must be [B, T] = {ids.shape}, got {None if mask is None else mask.shape}")


class BiGRUTextTower(nn.Module):
    """Bi-GRU text tower. Attributes: vocab_size, embed_dim (D, GRU hidden), word_dim (300), set_head
    (`SetPredictionModule(pos_encoding='sine')`, `PIEHead`, or None), global_pool ('rnn' | 'max'), dropout_rate (0.1).
    """

    vocab_size: int
    embed_dim: int
    word_dim: int = 300
    set_head: nn.Module | None = None
    global_pool: str = "rnn"
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, ids, mask, train: bool = False):
        _check_text(ids, mask)
        if self.global_pool not in ("rnn", "max"):
            raise ValueError(f"global_pool must be 'rnn' or 'max', got {self.global_pool!r}")
        dropout = nn.Dropout(self.dropout_rate, deterministic=not train)
        words = nn.Embed(self.vocab_size, self.word_dim, embedding_init=symmetric_uniform(0.1),
                         name=WORD_EMBED_NAME)(ids)
        words = dropout(words)
        gru = nn.Bidirectional(
            nn.RNN(nn.GRUCell(self.embed_dim, parent=None), name="gru_forward"),
            nn.RNN(nn.GRUCell(self.embed_dim, parent=None), name="gru_backward"),
            merge_fn=lambda fwd, bwd: (fwd + bwd) / 2, return_carry=True, name="gru")
        (last_fwd, last_bwd), outputs = gru(words, seq_lengths=jnp.sum(mask, axis=1).astype(jnp.int32))
        if self.global_pool == "rnn":
            global_feat = dropout((last_fwd + last_bwd) / 2)
        else:
            global_feat = masked_max(dropout(outputs), mask)
        return apply_set_head(self.set_head, words, mask, global_feat, deterministic=not train)


class BertTextTower(nn.Module):
    """BERT text tower. Attributes: bert (linen module, see module docstring), embed_dim (D), global_pool
    ('cls' | 'max'), set_head (`SetPredictionModule(pos_encoding='none')`, `PIEHead`, or None)."""

    bert: nn.Module
    embed_dim: int
    global_pool: str = "cls"
    set_head: nn.Module | None = None

    @nn.compact
    def __call__(self, ids, mask, train: bool = False):
        _check_text(ids, mask)
        if self.global_pool not in ("cls", "max"):
            raise ValueError(f"global_pool must be 'cls' or 'max', got {self.global_pool!r}")
        hidden = self.bert(ids, mask.astype(jnp.int32), deterministic=not train)
        check_tokens_and_mask("bert output", hidden, mask)
        local = nn.Dense(self.embed_dim, name="proj")(hidden)
        global_feat = local[:, 0] if self.global_pool == "cls" else masked_max(local, mask)
        return apply_set_head(self.set_head, local, mask, global_feat, deterministic=not train)


class BagOfWordsTextTower(nn.Module):
    """Embedding-bag tower (benchmarks, smoke tests). Attributes: vocab_size, embed_dim (D), word_dim, set_head."""

    vocab_size: int
    embed_dim: int
    word_dim: int = 300
    set_head: nn.Module | None = None

    @nn.compact
    def __call__(self, ids, mask, train: bool = False):
        _check_text(ids, mask)
        words = nn.Embed(self.vocab_size, self.word_dim, embedding_init=symmetric_uniform(0.1),
                         name=WORD_EMBED_NAME)(ids)
        global_feat = masked_max(nn.Dense(self.embed_dim, name="proj")(words), mask)
        return apply_set_head(self.set_head, words, mask, global_feat, deterministic=not train)


def replace_word_embeddings(params, matrix) -> dict:
    """Return a copy of `params` whose single `word_embed/embedding` table is replaced by `matrix` [V, E].

    Raises ValueError if there is no such table, more than one, or the shape differs.
    """
    found = []

    def visit(tree, path):
        if not isinstance(tree, dict):
            return tree
        out = {}
        for key, value in tree.items():
            if key == WORD_EMBED_NAME and isinstance(value, dict) and "embedding" in value:
                old = value["embedding"]
                if tuple(old.shape) != tuple(matrix.shape):
                    raise ValueError(f"matrix must have shape {tuple(old.shape)} (path {path + (key,)}), "
                                     f"got {tuple(matrix.shape)}")
                found.append(path + (key,))
                out[key] = {**value, "embedding": jnp.asarray(matrix, old.dtype)}
            else:
                out[key] = visit(value, path + (key,))
        return out

    new = visit(dict(params), ())
    if len(found) != 1:
        raise ValueError(f"expected exactly one '{WORD_EMBED_NAME}/embedding' table in params, found {found}")
    return new
