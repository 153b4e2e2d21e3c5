"""Resumable batches of Flow-CLIP training records read from a feature cache (`mmjax.models.feature_cache`).

Each record is (image, positive caption, hard negative or none, image identity); the batch of (epoch, step) is a
pure function of (seed, epoch, step), like `mmjax.data.pipeline.BatchIterator`, so a resumed run sees the same
batches. The cache is used through `records()`, `images(idx)` and `texts(idx)` only.
"""

from __future__ import annotations

import jax
import numpy as np


class CachedRecordIterator:
    """Resumable record batches from a feature cache (same protocol as `mmjax.data.pipeline.BatchIterator`)."""

    def __init__(self, cache, batch_size: int, seed: int, start=(0, 0)):
        records = cache.records()
        self.cache = cache
        self.image = np.array([r["image"] for r in records], np.int64)
        self.pos = np.array([r["pos"] for r in records], np.int64)
        self.neg = np.array([r.get("neg", -1) for r in records], np.int64)
        self.image_id = np.array([int(r.get("image_id", r["image"])) for r in records], np.int64)
        self.batch_size, self.seed = batch_size, seed
        self.steps_per_epoch = len(records) // batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(f"{len(records)} cached records are fewer than one batch of {batch_size}")
        pc, pi = jax.process_count(), jax.process_index()
        if batch_size % pc:
            raise ValueError(f"batch_size {batch_size} is not divisible by {pc} processes")
        self._slice = slice(pi * batch_size // pc, (pi + 1) * batch_size // pc)
        self.position = tuple(start)

    def batch_at(self, epoch: int, step: int) -> dict:
        order = np.random.default_rng(np.random.SeedSequence([self.seed, 0, epoch])).permutation(len(self.image))
        b = order[step * self.batch_size:(step + 1) * self.batch_size][self._slice]
        img, pos, neg = (self.cache.images(self.image[b]), self.cache.texts(self.pos[b]),
                         self.cache.texts(np.maximum(self.neg[b], 0)))
        return {"img_global": img["global"], "img_patches": img["patches"], "pos_global": pos["global"],
                "pos_tokens": pos["tokens"], "pos_valid": pos["valid"], "neg_global": neg["global"],
                "neg_tokens": neg["tokens"], "neg_token_valid": neg["valid"] & (self.neg[b] >= 0)[:, None],
                "neg_valid": self.neg[b] >= 0, "image_ids": self.image_id[b],
                "example_valid": np.ones(len(b), bool)}

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        batch = self.batch_at(*self.position)
        epoch, step = self.position
        self.position = (epoch + 1, 0) if step + 1 == self.steps_per_epoch else (epoch, step + 1)
        return batch

    def close(self):
        pass


