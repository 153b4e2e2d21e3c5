"""The host-side tiled score matrix: S[i, t] for every image row against every text row, one block at a time.

    S = tiled_scores(score_block, images, texts, image_block=…, text_block=…)      float32 [n_images, n_texts]

`score_block(image_tile, text_tile) -> [image_block, text_block]` is any jitted all-pairs scorer: a set similarity
(`mmjax.evaluation.embed.score_sets`), a Flow-CLIP head (its task's cache scorer and the Hugging Face CLIP
evaluation), a cosine. `images` and `texts` are pytrees of arrays sharing a leading row axis (e.g.
{"set", "mask"} or {"global", "tokens", "valid"}). Every tile is padded to its full size by repeating its last row
(`mmjax.batching.pad_rows`: a real row, so masked scorers stay finite), so `score_block` compiles once; the padding
is sliced off again. The loop runs over text tiles outside and image tiles inside: each text tile is moved to the
device and passed through `prepare_text_tile` once (a transposition or a text-side projection is never repeated per
image tile). Peak device memory is one text tile, one image tile and one [image_block, text_block] block; the
matrix itself lives on the host. Host arrays may be memory-mapped or of a storage dtype (float16 caches): only the
rows of one tile are read at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from mmjax.batching import pad_rows, progress


def _rows(tree) -> int:
    sizes = {np.shape(x)[0] for x in jax.tree_util.tree_leaves(tree)}
    if len(sizes) != 1:
        raise ValueError(f"the arrays of one side must share their leading (row) dimension; got {sorted(sizes)}")
    return sizes.pop()


def _tile(tree, start: int, size: int):
    return pad_rows(jax.tree_util.tree_map(lambda x: np.asarray(x)[start:start + size], tree), size)


def tiled_scores(score_block: Callable, images, texts, *, image_block: int, text_block: int,
                 prepare_text_tile: Callable | None = None, name: str | None = None) -> np.ndarray:
    """float32 [n_images, n_texts] (module docstring). `image_block` / `text_block` are clamped to the number of
    rows (a tile never exceeds its side); `name` labels a progress bar over text rows (None: silent)."""
    n_img, n_txt = _rows(images), _rows(texts)
    if n_img == 0 or n_txt == 0:
        raise ValueError(f"nothing to score: {n_img} image row(s) × {n_txt} text row(s)")
    if image_block < 1 or text_block < 1:
        raise ValueError(f"image_block and text_block must be >= 1; got {image_block}, {text_block}")
    image_block, text_block = min(image_block, n_img), min(text_block, n_txt)
    out = np.empty((n_img, n_txt), np.float32)
    with progress(n_txt, name, unit="text") as bar:
        for j in range(0, n_txt, text_block):  # text tiles outside: each is uploaded and prepared exactly once
            cols = min(text_block, n_txt - j)
            text_tile = jax.device_put(_tile(texts, j, text_block))
            if prepare_text_tile is not None:
                text_tile = prepare_text_tile(text_tile)
            for i in range(0, n_img, image_block):
                rows = min(image_block, n_img - i)
                out[i:i + rows, j:j + cols] = np.asarray(score_block(_tile(images, i, image_block),
                                                                     text_tile))[:rows, :cols]
            bar.update(cols)
    return out
