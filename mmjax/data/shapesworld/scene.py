"""Scene model (docs/design.md#shapesworld-scenes): objects in distinct grid cells, distinct colour–shape pairs,
relations.

A scene is a small frozen dataclass of per-object int tuples plus normalised boxes. Box geometry (side, centre
jitter) is sampled here, once, so pixels and regions modes share the same scene graph for a given index.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mmjax.data.shapesworld.config import COLOURS, SHAPES, SIZES, TYPICAL_COLOUR, ShapesWorldConfig


@dataclasses.dataclass(frozen=True)
class Scene:
    shape: tuple[int, ...]
    colour: tuple[int, ...]
    size: tuple[int, ...]  # 0 small, 1 large
    row: tuple[int, ...]
    col: tuple[int, ...]
    box: np.ndarray  # (n, 4) float64 normalised [x0, y0, x1, y1]
    has_unseen: bool

    @property
    def num_objects(self) -> int:
        return len(self.shape)


def relation_holds(rel: int, scene: Scene, a: int, b: int) -> bool:
    """Strict grid relations: 0 left, 1 right, 2 above, 3 below (row 0 = top, col 0 = left)."""
    if rel == 0:
        return scene.col[a] < scene.col[b]
    if rel == 1:
        return scene.col[a] > scene.col[b]
    if rel == 2:
        return scene.row[a] < scene.row[b]
    if rel == 3:
        return scene.row[a] > scene.row[b]
    raise ValueError(f"relation id must be in 0..3, got {rel}")


def true_relations(scene: Scene, a: int, b: int) -> list[int]:
    return [rel for rel in range(4) if relation_holds(rel, scene, a, b)]


def sample_scene(rng: np.random.Generator, cfg: ShapesWorldConfig, split: str) -> Scene:
    """Sample one scene; consumes `rng` in a fixed order (count, cells, unseen flag, attributes, geometry)."""
    g = cfg.grid
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    cells = rng.choice(g * g, size=n, replace=False)
    heldout = sorted(cfg.heldout_ids)
    heldout_set = cfg.heldout_ids
    forced = -1
    if split != "train" and rng.random() < cfg.p_unseen:
        forced = int(rng.integers(n))
    used: set[tuple[int, int]] = set()
    colours, shapes = [], []
    for i in range(n):
        if i == forced:
            # Rejection over the held-out list; a held-out pair cannot already be used by earlier objects unless
            # they were allowed any pair, hence the loop.
            while True:
                pair = heldout[int(rng.integers(len(heldout)))]
                if pair not in used:
                    break
        else:
            any_pair_allowed = forced >= 0  # unseen scene: the other objects take any pair
            pair = None
            # The language prior draws only when it is on, so the default stream (and every default scene) is unchanged.
            if cfg.typical_colour_prob > 0 and rng.random() < cfg.typical_colour_prob:
                shape = int(rng.integers(len(SHAPES)))
                typical = (COLOURS.index(TYPICAL_COLOUR[SHAPES[shape]]), shape)
                pair = typical if typical not in used else None  # a repeat falls back to a uniform pair
            while pair is None:
                pair = (int(rng.integers(len(COLOURS))), int(rng.integers(len(SHAPES))))
                if pair in used or (not any_pair_allowed and pair in heldout_set):
                    pair = None
        used.add(pair)
        colours.append(pair[0])
        shapes.append(pair[1])
    sizes = rng.integers(len(SIZES), size=n)
    jitter = rng.uniform(-cfg.centre_jitter, cfg.centre_jitter, size=(n, 2))
    rows = cells // g
    cols = cells % g
    side = np.where(sizes == 1, cfg.large_side, cfg.small_side) / g
    cx = (cols + 0.5 + jitter[:, 0]) / g
    cy = (rows + 0.5 + jitter[:, 1]) / g
    box = np.stack([cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2], axis=1)
    has_unseen = any((c, s) in heldout_set for c, s in zip(colours, shapes))
    return Scene(
        shape=tuple(shapes), colour=tuple(colours), size=tuple(int(z) for z in sizes),
        row=tuple(int(r) for r in rows), col=tuple(int(c) for c in cols), box=box, has_unseen=has_unseen)
