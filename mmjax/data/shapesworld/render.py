"""Pixels mode (docs/design.md#shapesworld-pixels): RGB uint8 images drawn with Pillow at `supersample`× and
box-downsampled.

Background: a light low-saturation base colour plus a linear ramp; objects in their base colour with per-object
jitter; Gaussian pixel noise after downsampling. Object geometry comes from the scene's boxes (shared with regions
mode). Shapes are never rotated (a rotated square would be a diamond).
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from mmjax.data.shapesworld.config import ShapesWorldConfig
from mmjax.data.shapesworld.scene import Scene

BASE_RGB = np.array([
    (220, 40, 40), (40, 170, 60), (40, 80, 220), (235, 210, 40),
    (140, 60, 180), (40, 200, 210), (245, 140, 30), (128, 128, 128),
], dtype=np.int64)  # order of config.COLOURS


def shape_polygon(shape: int, x0: float, y0: float, x1: float,
                  y1: float) -> list[tuple[float, float]] | None:
    cx, cy, side = (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0
    if shape == 1:  # square
        return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
    if shape == 2:  # isosceles triangle, apex up
        return [(cx, y0), (x1, y1), (x0, y1)]
    if shape == 3:  # diamond: vertices at the box mid-edges
        return [(cx, y0), (x1, cy), (cx, y1), (x0, cy)]
    if shape == 4:  # plus sign, arm thickness 0.33 side
        t = 0.33 * side / 2
        return [(cx - t, y0), (cx + t, y0), (cx + t, cy - t), (x1, cy - t), (x1, cy + t), (cx + t, cy + t),
                (cx + t, y1), (cx - t, y1), (cx - t, cy + t), (x0, cy + t), (x0, cy - t), (cx - t, cy - t)]
    if shape == 5:  # 5-point star, outer radius 0.5 side, inner 0.2 side, point up
        pts = []
        for k in range(10):
            radius = 0.5 * side if k % 2 == 0 else 0.2 * side
            angle = -math.pi / 2 + k * math.pi / 5
            pts.append((cx + radius * math.cos(angle), cy + radius * math.sin(angle)))
        return pts
    return None  # circle: drawn as an ellipse


def render_pixels(rng: np.random.Generator, cfg: ShapesWorldConfig, scene: Scene) -> np.ndarray:
    size, ss = cfg.image_size, cfg.supersample
    big = size * ss
    level = rng.uniform(*cfg.background_level)
    offset = rng.uniform(-cfg.background_offset, cfg.background_offset, size=3)
    amplitude = rng.uniform(0.0, cfg.background_ramp)
    theta = rng.uniform(0.0, 2 * math.pi)
    jitter = rng.integers(-cfg.colour_jitter, cfg.colour_jitter + 1, size=(scene.num_objects, 3))

    coords = (np.arange(big) + 0.5) / big - 0.5
    ramp = amplitude * (math.cos(theta) * coords[None, :] + math.sin(theta) * coords[:, None])  # in [−A/√2, A/√2]
    background = level + offset[None, None, :] + ramp[:, :, None]
    canvas = Image.fromarray(np.clip(np.rint(background), 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(canvas)
    for o in range(scene.num_objects):
        rgb = tuple(int(v) for v in np.clip(BASE_RGB[scene.colour[o]] + jitter[o], 0, 255))
        x0, y0, x1, y1 = (float(v) * big for v in scene.box[o])
        poly = shape_polygon(scene.shape[o], x0, y0, x1, y1)
        if poly is None:
            draw.ellipse([x0, y0, x1, y1], fill=rgb)
        else:
            draw.polygon(poly, fill=rgb)
    small = np.asarray(canvas.resize((size, size), Image.BOX), dtype=np.float64)
    noisy = small + rng.normal(0.0, cfg.pixel_noise_sigma, size=small.shape)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
