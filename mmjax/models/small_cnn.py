"""A small ResNet trained from scratch on ShapesWorld `pixels` (docs/design.md#grid-tower preset `maxmatch_pixels`)
[default].

    stem:   conv3×3(C₀) · BN · ReLU                                   (stride 1)
    stage s: BasicBlock(C_s, stride 1 if s = 0 else 2) × n_s
    BasicBlock(x) = ReLU( BN(conv3×3(ReLU(BN(conv3×3(x))))) + shortcut(x) ),  shortcut = conv1×1 · BN when shape changes

Widths 32-64-128-256 and three stride-2 stages map 64×64 pixels to an 8×8×256 map (64 grid tokens for `GridTower`).
uint8 inputs are scaled to [0, 1]; float inputs are used as given. BatchNorm: `train=True` with
`mutable=['batch_stats']` while training.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


class BasicBlock(nn.Module):
    """ResNet basic block (two 3×3 convs); the last BN scale starts at zero so each block starts as the identity."""

    features: int
    stride: int = 1

    @nn.compact
    def __call__(self, x, train: bool = False):
        norm = lambda name, **kw: nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                                               name=name, **kw)
        y = nn.Conv(self.features, (3, 3), self.stride, padding=1, use_bias=False, name="conv1")(x)
        y = nn.relu(norm("bn1")(y))
        y = nn.Conv(self.features, (3, 3), 1, padding=1, use_bias=False, name="conv2")(y)
        y = norm("bn2", scale_init=nn.initializers.zeros)(y)
        if x.shape[-1] != self.features or self.stride != 1:
            x = nn.Conv(self.features, (1, 1), self.stride, use_bias=False, name="shortcut_conv")(x)
            x = norm("shortcut_bn")(x)
        return nn.relu(x + y)


class SmallResNet(nn.Module):
    """`__call__(images [B,H,W,C], train=False) -> feature map [B, H/8, W/8, widths[-1]]`.

    Attributes: widths ((32, 64, 128, 256)), blocks_per_stage ((1, 1, 1, 1)).
    """

    widths: tuple[int, ...] = (32, 64, 128, 256)
    blocks_per_stage: tuple[int, ...] = (1, 1, 1, 1)

    @nn.compact
    def __call__(self, images, train: bool = False):
        if images.ndim != 4:
            raise ValueError(f"images must be [B, H, W, C], got shape {images.shape}")
        if len(self.widths) != len(self.blocks_per_stage):
            raise ValueError(f"widths {self.widths} and blocks_per_stage {self.blocks_per_stage} differ in length")
        x = images.astype(jnp.float32) / 255.0 if images.dtype == jnp.uint8 else images
        x = nn.Conv(self.widths[0], (3, 3), padding=1, use_bias=False, name="stem_conv")(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, name="stem_bn")(x))
        for stage, (width, blocks) in enumerate(zip(self.widths, self.blocks_per_stage)):
            for block in range(blocks):
                stride = 2 if (stage > 0 and block == 0) else 1
                x = BasicBlock(width, stride, name=f"stage{stage}_block{block}")(x, train)
        return x
