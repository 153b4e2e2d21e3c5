"""Ground truth for a base's local tokens on ShapesWorld: which object each image token lies on, that object's
attributes, and which objects each colour or shape word of a caption names (`mmjax.evaluation.local_probes`).

- Pixel bases: the ViT's patch p of a `grid` × `grid` patch grid covers the image square of row p // grid and column
  p % grid; it lies on object o when its centre falls inside o's box (boxes are normalised [x0, y0, x1, y1] and
  objects sit in distinct cells, so at most one does).
- Region bases: region r lies on `region_object[r]` (−1 for background and padding regions).
- Words: caption meanings name one object description ("a small red square") or two; the k-th colour word and the
  k-th shape word of a caption belong to the k-th description, and every scene object matching it (colour, shape and,
  when stated, size) is a named object. The ShapesWorld word tokenizer puts word w at token position w + 1 ([CLS]
  first).
"""

from __future__ import annotations

import numpy as np

from mmjax.data.shapesworld.config import COLOURS, SHAPES

ATTRIBUTES = ("colour", "shape", "size", "cell")


def patch_objects(data: dict, grid: int) -> np.ndarray:
    """int [N, grid·grid]: the object under each patch centre, −1 for background."""
    centres = (np.arange(grid) + 0.5) / grid
    cy, cx = np.meshgrid(centres, centres, indexing="ij")
    cx, cy = cx.reshape(-1), cy.reshape(-1)                      # [P]
    box = np.asarray(data["obj_box"], np.float64)                # [N, O, 4]
    present = np.asarray(data["obj_shape"]) >= 0                 # [N, O]
    inside = ((box[:, None, :, 0] <= cx[None, :, None]) & (cx[None, :, None] < box[:, None, :, 2])
              & (box[:, None, :, 1] <= cy[None, :, None]) & (cy[None, :, None] < box[:, None, :, 3])
              & present[:, None, :])                             # [N, P, O]
    return np.where(inside.any(-1), inside.argmax(-1), -1).astype(np.int32)


def object_attributes(data: dict) -> dict[str, np.ndarray]:
    """{"colour", "shape", "size", "cell"}: int [N, O] per object (−1 where no object)."""
    shape = np.asarray(data["obj_shape"])
    cell = np.where(shape >= 0, np.asarray(data["obj_row"]) * 3 + np.asarray(data["obj_col"]), -1)
    return {"colour": np.asarray(data["obj_colour"]), "shape": shape, "size": np.asarray(data["obj_size"]),
            "cell": cell}


def token_labels(data: dict, token_object: np.ndarray) -> dict[str, np.ndarray]:
    """Per-token attribute labels [N, T] (−1 where the token lies on no object), from `token_object` [N, T]."""
    attrs = object_attributes(data)
    rows = np.arange(len(token_object))[:, None]
    safe = np.maximum(token_object, 0)
    return {name: np.where(token_object >= 0, values[rows, safe], -1) for name, values in attrs.items()}


def named_objects(data: dict) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """[(image, caption, token position, named objects)] for every colour and shape word of every caption of the
    split (module docstring)."""
    colour, shape, size = (np.asarray(data[k]) for k in ("obj_colour", "obj_shape", "obj_size"))
    out = []
    for i, caps in enumerate(data["captions"]):
        for k, text in enumerate(caps):
            m = data["caption_meaning"][i, k]
            descriptions = [(m[2], m[3], m[4])] + ([(m[5], m[6], m[7])] if m[5] >= 0 else [])
            matches = [tuple(int(o) for o in np.flatnonzero((colour[i] == c) & (shape[i] == s)
                                                           & ((size[i] == z) | (z < 0)) & (shape[i] >= 0)))
                       for c, s, z in descriptions]
            seen = {"colour": 0, "shape": 0}
            for w, word in enumerate(text.split()):
                kind = "colour" if word in COLOURS else "shape" if word in SHAPES else None
                if kind is None:
                    continue
                d = seen[kind]
                seen[kind] += 1
                if d < len(matches) and matches[d]:
                    out.append((i, k, w + 1, matches[d]))
    return out
