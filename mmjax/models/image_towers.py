"""Image towers of MaxMatch / Set Div (docs/design.md#region-tower): precomputed region features and grid feature maps.

Both share one head over local features x_n ∈ R^F (n valid under the mask μ):

    u_n = fc(x_n)                                     fc: F → D
    h_n = Dropout( u_n + MLP(u_n) )                   MLP: D → D/2 (BatchNorm, ReLU) → D
    g   = max_{n: μ_n=1} h_n   ('max')   or   GPO(h, μ)   ('gpo')
    set = set_head(h, μ, g)                           SPM (no positional encoding) | PIE | None (single vector)

Reference: `kdwonn/DivE` `model_spm.py` `EncoderImage` with `--gpo_1x1 --img_res_first_fc --img_res_pool max`.
Region drop (train augmentation, p = 0.2) is the input pipeline's job: it arrives here as a mask.

BatchNorm: call with `train=True` and `mutable=['batch_stats']` while training (statistics over the valid tokens of
the whole, possibly sharded, batch — the reference's SyncBN behaviour); `train=False` uses the running averages.
`bn_use_mask=True` [default] excludes padded tokens from the statistics; the reference (`SequenceBN`) includes them.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from mmjax.models.gpo import GPO
from mmjax.models.pooling import masked_max
from mmjax.models.towers import apply_set_head, check_tokens_and_mask


class ResidualProjection(nn.Module):
    """h = Dropout(fc(x) + MLP(fc(x))), MLP = Linear(D→hidden) · BatchNorm · ReLU · Linear(hidden→D).

    Attributes: embed_dim (D), hidden_dim (None → D // 2), dropout_rate (0.1), bn_momentum (0.9 = torch 0.1),
    bn_epsilon (1e-5), bn_use_mask (True: padded tokens do not enter the BatchNorm statistics).
    """

    embed_dim: int
    hidden_dim: int | None = None
    dropout_rate: float = 0.1
    bn_momentum: float = 0.9
    bn_epsilon: float = 1e-5
    bn_use_mask: bool = True

    @nn.compact
    def __call__(self, x, mask=None, train: bool = False):
        u = nn.Dense(self.embed_dim, name="fc")(x)
        hidden = nn.Dense(self.hidden_dim or self.embed_dim // 2, name="mlp_fc1")(u)
        bn_mask = None if (mask is None or not self.bn_use_mask) else mask[..., None].astype(bool)
        hidden = nn.BatchNorm(momentum=self.bn_momentum, epsilon=self.bn_epsilon, name="mlp_bn")(
            hidden, use_running_average=not train, mask=bn_mask)
        h = u + nn.Dense(self.embed_dim, name="mlp_fc2")(nn.relu(hidden))
        return nn.Dropout(self.dropout_rate)(h, deterministic=not train)


class LocalFeatureSetTower(nn.Module):
    """The shared head above: local features [B,N,F] + mask [B,N] → tower outputs (see `mmjax.models.towers`).

    Attributes: embed_dim (D), pool ('max' [default, Set Div] | 'gpo' [VSE∞]; `maxmatch.img_pool`), set_head
    (`SetPredictionModule(pos_encoding='none')`, `PIEHead`, or None for the single-vector baseline), hidden_dim,
    dropout_rate, bn_use_mask (see `ResidualProjection`).
    """

    embed_dim: int
    pool: str = "max"
    set_head: nn.Module | None = None
    hidden_dim: int | None = None
    dropout_rate: float = 0.1
    bn_use_mask: bool = True

    @nn.compact
    def __call__(self, feats, mask=None, train: bool = False):
        check_tokens_and_mask("feats", feats, mask)
        if self.pool not in ("max", "gpo"):
            raise ValueError(f"pool must be 'max' or 'gpo', got {self.pool!r}")
        h = ResidualProjection(self.embed_dim, self.hidden_dim, self.dropout_rate, bn_use_mask=self.bn_use_mask,
                               name="projection")(feats, mask, train)
        if self.pool == "max":
            global_feat = masked_max(h, mask)
        else:
            global_feat, _ = GPO(name="gpo")(h, mask)
        return apply_set_head(self.set_head, h, mask, global_feat, deterministic=not train)


class RegionTower(LocalFeatureSetTower):
    """Precomputed region features (BUTD 36 × 2048; ShapesWorld 10 × 256): `__call__(feats [B,R,F], mask [B,R])`."""


class GridTower(nn.Module):
    """Grid features: an optional conv backbone (e.g. `SmallResNet`, called as `backbone(x, train=train)` and
    returning [B,H,W,C]) or precomputed maps, flattened to H·W tokens, then the `LocalFeatureSetTower` head with every
    token valid. `__call__(images [B,H,W,C_in] or maps [B,H,W,C] / [B,N,C], train=False)`.
    """

    embed_dim: int
    backbone: nn.Module | None = None
    pool: str = "max"
    set_head: nn.Module | None = None
    hidden_dim: int | None = None
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, images, mask=None, train: bool = False):
        if mask is not None:
            raise ValueError("GridTower takes no mask: every grid cell is a valid token (grid drop is not implemented)")
        maps = images if self.backbone is None else self.backbone(images, train=train)
        if maps.ndim == 4:
            maps = maps.reshape(maps.shape[0], -1, maps.shape[-1])
        check_tokens_and_mask("images", maps, None)
        head = LocalFeatureSetTower(self.embed_dim, self.pool, self.set_head, self.hidden_dim, self.dropout_rate,
                                    name="head")
        return head(maps, None, train)
