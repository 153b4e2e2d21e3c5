"""Score-function adapters shared by the compositional, control and zero-shot evaluators.

The evaluators call one **pair scorer**

    score_fn(image_sources: list[CompositionalRecord], captions: list[str]) -> float array [n]

where pair p scores caption `captions[p]` against the image of record `image_sources[p]` (its `image`, `bbox`,
`image_id` and `meta`, e.g. ShapesWorld's `meta['image_index']`). Passing the image-source record rather than a path
lets the replacement controls hand a *different* record's (cropped) image to the same captions.

Adapters:
- `EmbeddingScorer(encode_images, encode_texts, score)`: embeds each distinct image (key = (image, bbox)) and each
  distinct caption once, caches them, and scores either pairwise (`mode='pairs'`: `score(img_emb, txt_emb) -> [n]`,
  row p against row p) or as a matrix over the batch's distinct images × distinct captions (`mode='matrix'`:
  `score(img_emb [U], txt_emb [C]) -> [U, C]`, then gathered). Both pad the batch (n, or U and C) to a power of two so
  a jitted scorer compiles a handful of times, not once per batch. An all-pairs scorer such as
  `mmjax.flowclip.score_pairs` is used in pairs mode through `pair_diagonal`: a batch of n pairs holds up to n distinct
  images and n distinct captions, so its matrix costs up to n times the n pairs asked for. Embeddings are pytrees of
  arrays with a leading axis.
- `cosine_pairs` (plain CLIP / Global-M on unit vectors), `set_pairs(kind, **kw)` (MaxMatch / set baselines:
  `mmjax.similarity.block_similarity` on the diagonal blocks, `{"set", "mask"}` embeddings).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.batching import pad_rows
from mmjax.data.tokenizers import check_texts
from mmjax.normalize import unit_normalize
from mmjax.similarity import block_similarity, resolve_kind


def default_image_key(record) -> Hashable:
    """Two records show the same pixels iff they share (image, bbox)."""
    return (record.image, record.bbox)


def _stack(trees: list):
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs, axis=0), *trees)


def _bucket(n: int) -> int:
    return max(8, 1 << (n - 1).bit_length())


def _rows(tree, n: int) -> list:
    return [jax.tree_util.tree_map(lambda x, i=i: np.asarray(x)[i], tree) for i in range(n)]


class EmbeddingScorer:
    """Pair scorer with per-image / per-caption embedding caches (module docstring).

    Args:
      encode_images: list[record] -> pytree with leading axis (one row per record, in order).
      encode_texts: list[str] -> pytree with leading axis.
      score: pairs mode `(img [n], txt [n]) -> [n]`; matrix mode `(img [U], txt [C]) -> [U, C]`.
      mode: 'pairs' or 'matrix'.
      image_key: record -> hashable cache key (default (image, bbox)).
    """

    def __init__(self, encode_images: Callable, encode_texts: Callable, score: Callable, *, mode: str = "pairs",
                 image_key: Callable = default_image_key):
        if mode not in ("pairs", "matrix"):
            raise ValueError(f"mode must be 'pairs' or 'matrix', got {mode!r}")
        self.encode_images, self.encode_texts, self.score = encode_images, encode_texts, score
        self.mode, self.image_key = mode, image_key
        self.image_cache: dict = {}
        self.text_cache: dict = {}

    def _fill(self, cache: dict, keys: list, items: list, encode: Callable) -> None:
        todo = {}
        for key, item in zip(keys, items):
            if key not in cache and key not in todo:
                todo[key] = item
        if todo:
            rows = _rows(encode(list(todo.values())), len(todo))
            cache.update(zip(todo.keys(), rows))

    def __call__(self, image_sources: Sequence, captions: Sequence[str]) -> np.ndarray:
        if len(image_sources) != len(captions):
            raise ValueError(f"{len(image_sources)} images for {len(captions)} captions")
        check_texts(captions)  # a NUL character: ValueError naming the caption's index p
        ikeys = [self.image_key(r) for r in image_sources]
        self._fill(self.image_cache, ikeys, list(image_sources), self.encode_images)
        self._fill(self.text_cache, list(captions), list(captions), self.encode_texts)
        if self.mode == "pairs":
            n = len(captions)
            img = pad_rows(_stack([self.image_cache[k] for k in ikeys]), _bucket(n))
            txt = pad_rows(_stack([self.text_cache[c] for c in captions]), _bucket(n))
            return np.asarray(self.score(img, txt), np.float32).reshape(-1)[:n]
        uimg = list(dict.fromkeys(ikeys))
        ucap = list(dict.fromkeys(captions))
        # The distinct counts change every batch; padding them to a power of two (edge rows, sliced off) bounds the
        # number of shapes — and of compilations of a jitted `score` — to a handful.
        img = pad_rows(_stack([self.image_cache[k] for k in uimg]), _bucket(len(uimg)))
        txt = pad_rows(_stack([self.text_cache[c] for c in ucap]), _bucket(len(ucap)))
        matrix = np.asarray(self.score(img, txt), np.float32)[:len(uimg), :len(ucap)]
        row = {k: i for i, k in enumerate(uimg)}
        col = {c: j for j, c in enumerate(ucap)}
        return matrix[[row[k] for k in ikeys], [col[c] for c in captions]]


def pair_diagonal(score_all: Callable, img, txt) -> jax.Array:
    """[n] scores of image row p against caption row p, from an all-pairs scorer `score_all(img [U], txt [C]) -> [U,
    C]`: n problems of 1 × 1 (vmapped), i.e. the diagonal of `score_all(img, txt)` without its n² − n other cells."""
    return jax.vmap(lambda i, t: score_all(*jax.tree_util.tree_map(lambda x: x[None], (i, t)))[0, 0])(img, txt)


@jax.jit
def cosine_pairs(img, txt) -> jax.Array:
    """cos(v_p, t_p) for rows of [n, d] embeddings (normalised here, float32)."""
    img = jnp.asarray(img, jnp.float32)
    txt = jnp.asarray(txt, jnp.float32)
    img, txt = unit_normalize(img), unit_normalize(txt)
    return jnp.sum(img * txt, axis=-1)


def set_pairs(kind: str, **kw) -> Callable:
    """Pair score s(V_p, T_p) of a set similarity kind on {"set": [n, K, D], "mask": [n, K] (optional)} dicts.
    `kind` may be an alias (`'S_H'`); an unknown kind is refused here, before any embedding."""
    kind = resolve_kind(kind)

    @jax.jit
    def score(img, txt):
        c = jnp.einsum("nkd,njd->nkj", img["set"], txt["set"], preferred_element_type=jnp.float32)
        return block_similarity(c, kind, img.get("mask"), txt.get("mask"), **kw)
    return score


def shapesworld_suites_context(data: dict, encode_images: Callable, encode_texts: Callable, score: Callable, *,
                               mode: str = "pairs") -> dict:
    """Compositional-evaluator context for a generated ShapesWorld split: {"records": its suites, "score_fn",
    "suite_means": the means over suites the claims read}.

    encode_images(image indices int [n]) and encode_texts(list of str) return embedding pytrees with a leading axis;
    `score` is the pair (or matrix, `mode='matrix'`) score of `EmbeddingScorer`. Records name their image by
    `meta['image_index']`, so the replacement controls can hand any record's image to the same captions.
    """
    from mmjax.data.shapesworld.suites import SUITE_MEANS, build_suites

    def by_record(records):
        return encode_images(np.array([r.meta["image_index"] for r in records]))

    return {"records": build_suites(data), "score_fn": EmbeddingScorer(by_record, encode_texts, score, mode=mode),
            "suite_means": SUITE_MEANS}
