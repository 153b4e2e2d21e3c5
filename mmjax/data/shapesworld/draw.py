"""Pictures of ShapesWorld scenes for notebooks and reports (not part of the data pipeline).

`draw_scene(scene)` renders a scene graph as a clean RGB uint8 image: a flat light background, faint 3 × 3 grid
lines and every object filled with its base colour (the colour table and polygons of pixels mode, no jitter, ramp
or noise), so a regions-mode split — which has no pixels — can be looked at too. `scene_image(data, i)` returns the
generated pixels when the split has them and the clean drawing otherwise. `plot_scenes(data, indices)` lays out a
grid of scenes with their five captions underneath.

Geometry is the scene's own normalised boxes [x0, y0, x1, y1] scaled by the image side; drawing happens at
`supersample`× and is box-downsampled, as in pixels mode.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

from mmjax.data.shapesworld.render import BASE_RGB, shape_polygon
from mmjax.data.shapesworld.scene import Scene

BACKGROUND = (238, 238, 238)
GRID_RGB = (205, 205, 205)


def draw_scene(scene: Scene, *, size: int = 64, supersample: int = 4, background=BACKGROUND,
               grid: bool = True) -> np.ndarray:
    """uint8 [size, size, 3] picture of `scene`: objects in their base colours on a flat background."""
    if size < 8:
        raise ValueError(f"draw_scene: size must be >= 8 pixels, got {size}")
    if supersample < 1:
        raise ValueError(f"draw_scene: supersample must be >= 1, got {supersample}")
    box = np.asarray(scene.box, np.float64)
    if box.shape != (scene.num_objects, 4):
        raise ValueError(f"draw_scene: scene.box must have shape ({scene.num_objects}, 4), got {box.shape}")
    big = size * supersample
    canvas = Image.new("RGB", (big, big), tuple(int(v) for v in background))
    draw = ImageDraw.Draw(canvas)
    if grid:
        # Cell borders make the row/column words of the captions (top, left, ...) easy to check by eye.
        for k in (1, 2):
            p = round(k * big / 3)
            draw.line([(p, 0), (p, big)], fill=GRID_RGB, width=supersample)
            draw.line([(0, p), (big, p)], fill=GRID_RGB, width=supersample)
    for o in range(scene.num_objects):
        rgb = tuple(int(v) for v in BASE_RGB[scene.colour[o]])
        x0, y0, x1, y1 = (float(v) * big for v in box[o])
        poly = shape_polygon(scene.shape[o], x0, y0, x1, y1)
        if poly is None:  # circle
            draw.ellipse([x0, y0, x1, y1], fill=rgb)
        else:
            draw.polygon(poly, fill=rgb)
    return np.asarray(canvas.resize((size, size), Image.BOX), dtype=np.uint8)


def scene_image(data: dict, index: int, *, size: int = 64) -> np.ndarray:
    """The picture of image `index` of a `generate(...)` split: its pixels (pixels mode) or `draw_scene`."""
    n = len(data["scenes"])
    if not 0 <= index < n:
        raise IndexError(f"scene_image: index {index} out of range for a split of {n} images")
    if "images" in data:
        return np.asarray(data["images"][index], np.uint8)
    return draw_scene(data["scenes"][index], size=size)


def caption_block(captions: Sequence[str], width: int = 34, marks: Sequence[str] | None = None) -> str:
    """Captions as wrapped lines ('1. a red circle ...'), optionally prefixed by per-caption marks."""
    lines = []
    for k, cap in enumerate(captions):
        head = f"{marks[k]} " if marks is not None else f"{k + 1}. "
        lines.extend(textwrap.wrap(head + cap, width=width, subsequent_indent="   "))
    return "\n".join(lines)


def plot_scenes(data: dict, indices: Sequence[int], *, cols: int = 4, captions: bool = True, size: int = 96,
                title: str | None = None, panel_inches: float = 2.7):
    """matplotlib Figure: one panel per image of `indices` (title = image id) with its captions underneath."""
    import matplotlib.pyplot as plt

    indices = [int(i) for i in indices]
    if not indices:
        raise ValueError("plot_scenes: indices is empty")
    cols = max(1, min(cols, len(indices)))
    rows = -(-len(indices) // cols)
    text_h = 1.9 if captions else 0.0  # five wrapped captions under each panel
    # constrained layout places the suptitle right above the panels (tight_layout left a blank band under it)
    fig, axes = plt.subplots(rows, cols, figsize=(panel_inches * cols, (panel_inches + text_h) * rows),
                             squeeze=False, layout="constrained")
    for ax, i in zip(axes.flat, indices):
        ax.imshow(scene_image(data, i, size=size), interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        unseen = " (held-out pair)" if bool(data["has_unseen"][i]) else ""
        ax.set_title(f"image {i}{unseen}", fontsize=8)
        if captions:
            ax.set_xlabel(caption_block(data["captions"][i]), fontsize=6.5, loc="left", family="monospace")
    for ax in list(axes.flat)[len(indices):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
