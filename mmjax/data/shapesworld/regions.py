"""Regions mode (docs/design.md#shapesworld-regions): R detector-like feature vectors of dimension F per image.

    object:      x = E_shape[s] + E_colour[c] + E_size[z] + β_box W_box b + σ ξ
    partial:     x = γ (E_shape + E_colour + E_size)[o] + β_box W_box b' + σ ξ,  γ ~ U[0.3, 0.7]
    background:  x = E_bg + β_box W_box b_rand + σ ξ
with ξ ~ N(0, I/F) and b = [x0, y0, x1, y1, cx, cy, w, h]. Binding is local to a region; position is carried by the
box term. All sums run in float64 without BLAS (fixed-order elementwise accumulation), then cast to float32, so the
bytes do not depend on the BLAS build.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mmjax.data.shapesworld.config import CONSTANTS_KEY, COLOURS, SHAPES, SIZES, ShapesWorldConfig
from mmjax.data.shapesworld.scene import Scene

KIND_OBJECT, KIND_PARTIAL, KIND_BACKGROUND, KIND_PADDING = 0, 1, 2, -1


@dataclasses.dataclass(frozen=True)
class RegionConstants:
    """Dataset-level embeddings, a function of the master seed only (SeedSequence([seed, 9, 0]))."""

    e_shape: np.ndarray  # (6, F) float64
    e_colour: np.ndarray  # (8, F)
    e_size: np.ndarray  # (2, F)
    e_bg: np.ndarray  # (F,)
    w_box: np.ndarray  # (F, 8)


def region_constants(cfg: ShapesWorldConfig) -> RegionConstants:
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([cfg.seed, CONSTANTS_KEY, 0])))
    f = cfg.region_dim
    std = 1.0 / np.sqrt(f)
    return RegionConstants(
        e_shape=rng.normal(0.0, std, (len(SHAPES), f)),
        e_colour=rng.normal(0.0, std, (len(COLOURS), f)),
        e_size=rng.normal(0.0, std, (len(SIZES), f)),
        e_bg=rng.normal(0.0, std, (f,)),
        w_box=rng.normal(0.0, std, (f, 8)),
    )


def _descriptor(box: np.ndarray) -> np.ndarray:
    x0, y0, x1, y1 = box.T
    return np.stack([x0, y0, x1, y1, (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], axis=1)


def _box_term(consts: RegionConstants, boxes: np.ndarray) -> np.ndarray:
    desc = _descriptor(boxes)  # (n, 8)
    out = np.zeros((boxes.shape[0], consts.w_box.shape[0]))
    for k in range(8):  # explicit accumulation order: no BLAS
        out += desc[:, k:k + 1] * consts.w_box[None, :, k]
    return out


def render_regions(rng: np.random.Generator, cfg: ShapesWorldConfig, consts: RegionConstants, scene: Scene) -> dict:
    r, f, n = cfg.num_regions, cfg.region_dim, scene.num_objects
    n_valid = n + int(rng.integers(0, r - n + 1)) if cfg.variable_regions else r
    n_dis = n_valid - n
    kinds = np.where(rng.random(n_dis) < 0.5, KIND_BACKGROUND, KIND_PARTIAL)
    shape, colour, size = (np.asarray(v) for v in (scene.shape, scene.colour, scene.size))
    attr = consts.e_shape[shape] + consts.e_colour[colour] + consts.e_size[size]  # (n, F)

    feats = [attr]
    boxes = [scene.box]
    owner = [np.arange(n)]
    for kind in kinds:
        if kind == KIND_BACKGROUND:
            wh = rng.uniform(*cfg.background_box_size, size=2)
            xy = rng.uniform(0.0, 1.0, size=2) * (1.0 - wh)
            boxes.append(np.array([[xy[0], xy[1], xy[0] + wh[0], xy[1] + wh[1]]]))
            feats.append(consts.e_bg[None])
            owner.append(np.array([-1]))
        else:
            o = int(rng.integers(n))
            gamma = rng.uniform(*cfg.partial_gamma)
            shift = rng.uniform(-cfg.partial_shift, cfg.partial_shift, size=2)
            scale = rng.uniform(*cfg.partial_scale, size=2)
            x0, y0, x1, y1 = scene.box[o]
            cx, cy = (x0 + x1) / 2 + shift[0], (y0 + y1) / 2 + shift[1]
            hw, hh = (x1 - x0) * scale[0] / 2, (y1 - y0) * scale[1] / 2
            boxes.append(np.clip(np.array([[cx - hw, cy - hh, cx + hw, cy + hh]]), 0.0, 1.0))
            feats.append(gamma * attr[o][None])
            owner.append(np.array([o]))
    feats = np.concatenate(feats)
    boxes = np.concatenate(boxes)
    owner = np.concatenate(owner)
    kind_all = np.concatenate([np.full(n, KIND_OBJECT), kinds]).astype(np.int32)
    noise = rng.normal(0.0, 1.0 / np.sqrt(f), size=(n_valid, f))
    x = feats + cfg.beta_box * _box_term(consts, boxes) + cfg.region_noise * noise
    perm = rng.permutation(n_valid)  # padding (variable_regions) stays at the end

    out = {
        "regions": np.zeros((r, f), np.float32),
        "region_boxes": np.zeros((r, 4), np.float32),
        "region_mask": np.zeros((r,), bool),
        "region_kind": np.full((r,), KIND_PADDING, np.int32),
        "region_object": np.full((r,), -1, np.int32),
    }
    out["regions"][:n_valid] = x[perm].astype(np.float32)
    out["region_boxes"][:n_valid] = boxes[perm].astype(np.float32)
    out["region_mask"][:n_valid] = True
    out["region_kind"][:n_valid] = kind_all[perm]
    out["region_object"][:n_valid] = owner[perm]
    return out
