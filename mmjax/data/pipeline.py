"""Input pipeline: deterministic, resumable, per-process batches of images with all their captions.

Batch layout (numpy; b = global batch / process_count images on this process, C captions per image, T tokens):
    image_feats   [b, R, F] float32   regions sources (dropped regions are zeroed), with
    image_mask    [b, R]    bool      valid (and not dropped) regions
    images        [b, H, W, 3] uint8  pixel sources (instead of image_feats / image_mask)
    image_ids     [b]       int64     dataset image id
    example_index [b]       int64     row in the source
    example_valid [b]       bool      False only for padding rows of a last partial batch (drop_remainder=False)
    caption_ids   [b*C, T]  int32     caption c of local image i at row i*C + c (multi-positive sets)
    caption_mask  [b*C, T]  bool      attention mask (real tokens incl. specials)
    caption_valid [b*C, T]  bool      valid tokens (non-special, non-padding; Flow-CLIP's V_T)
    caption_image [b*C]     int32     local index of each caption's image
    caption_uid   [b*C]     int64     image_id*C + c (caption identity across processes)
  optional (source built with negatives, Flow-CLIP):
    neg_caption_ids / neg_caption_mask / neg_caption_valid [b*C, T], neg_valid [b*C] bool (record has a T⁻)
  optional (`pair_truth`, a source that knows its captions' meanings: ShapesWorld):
    caption_true  [b, B*C]  bool      caption q of the *global* batch is true of local image i (its own captions
                                      included), whatever image it was generated for: the in-batch false negatives
                                      `loss.false_negatives='ignore'` keeps out of the negatives

Order: the epoch permutation comes from SeedSequence([seed, 0, epoch]); the augmentation draws for a step from
SeedSequence([seed, 1, epoch, step]) over the whole *global* batch, of which each process keeps its slice
[process_index·b, (process_index+1)·b) — so a batch is a pure function of (seed, epoch, step) and the same global
batch results whatever the process count. `BatchIterator(source, cfg, start=(epoch, step))` resumes exactly.

Augmentation (docs/design.md#data-pipeline, Set Div / VSE∞ data pipeline), training only:
- region drop: each valid region dropped with p = `region_drop_prob`, at least `min_regions` kept;
- caption token drop: each valid token with p = `caption_drop_prob` → `caption_mask_frac` (0.5) [MASK],
  `caption_random_frac` (0.1) a random non-special token, the rest (0.4) deleted (sequence re-packed); at least
  `min_caption_tokens` valid tokens remain (a row that would fall below keeps its deleted tokens). Negatives
  are not augmented.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
from typing import Callable, Iterator

import numpy as np

from mmjax.data.shapesworld.suites import pair_truth as shapesworld_pair_truth


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    batch_size: int = 128  # global number of images per step
    seed: int = 0
    shuffle: bool = True
    drop_remainder: bool = True
    num_epochs: int | None = None  # None = endless
    augment: bool = True
    region_drop_prob: float = 0.2
    min_regions: int = 1
    caption_drop_prob: float = 0.2
    caption_mask_frac: float = 0.5
    caption_random_frac: float = 0.1
    min_caption_tokens: int = 1
    prefetch: int = 2  # batches prepared ahead by a background thread; 0 = synchronous
    pair_truth: bool = False  # add `caption_true` (module docstring); needs a source with `pair_truth`
    process_index: int | None = None  # None → jax.process_index()
    process_count: int | None = None  # None → jax.process_count()


@dataclasses.dataclass(frozen=True)
class InMemorySource:
    """Tokenised examples. `images` is [N,R,F] float (regions, with `image_mask` [N,R]) or [N,H,W,3] uint8."""

    images: np.ndarray
    image_mask: np.ndarray | None
    image_ids: np.ndarray  # [N]
    caption_ids: np.ndarray  # [N, C, T]
    caption_mask: np.ndarray
    caption_valid: np.ndarray
    pad_id: int
    mask_id: int | None
    random_token_ids: np.ndarray  # ids a "random token" replacement draws from (non-special vocabulary)
    neg_ids: np.ndarray | None = None  # [N, C, T]
    neg_mask: np.ndarray | None = None
    neg_token_valid: np.ndarray | None = None
    neg_valid: np.ndarray | None = None  # [N, C]
    # pair_truth(caption_rows [M], image_rows [b]) -> bool [b, M·C]: reading c of example caption_rows[k] is true of
    # example image_rows[i] (ShapesWorld: `shapesworld.suites.pair_truth`); None: the source cannot tell
    pair_truth: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    def __post_init__(self):
        n = len(self.images)
        for name in ("image_ids", "caption_ids", "caption_mask", "caption_valid"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"InMemorySource.{name} has {len(getattr(self, name))} rows, images has {n}")
        if self.caption_ids.ndim != 3:
            raise ValueError(f"InMemorySource.caption_ids must be [N, C, T], got shape {self.caption_ids.shape}")
        if self.image_mask is not None and self.image_mask.shape != self.images.shape[:2]:
            raise ValueError(f"InMemorySource.image_mask shape {self.image_mask.shape} != images[:2] "
                             f"{self.images.shape[:2]}")

    @property
    def is_regions(self) -> bool:
        return self.image_mask is not None


def source_from_shapesworld(data: dict, tokenizer, *, with_negatives: bool = False) -> InMemorySource:
    """Tokenise a `mmjax.data.shapesworld.generate(...)` split (training negatives from `train_neg_index`)."""
    n = len(data["captions"])
    c = len(data["captions"][0])
    enc = tokenizer.encode([t for caps in data["captions"] for t in caps])
    shape = (n, c, -1)
    kwargs = {}
    if with_negatives:
        idx = data["train_neg_index"].reshape(-1)
        neg = tokenizer.encode([data["neg_text"][j] if j >= 0 else "" for j in idx])
        kwargs = dict(neg_ids=neg.ids.reshape(shape), neg_mask=neg.attention_mask.reshape(shape),
                      neg_token_valid=neg.valid_mask.reshape(shape), neg_valid=(idx >= 0).reshape(n, c))
    regions = "regions" in data
    return InMemorySource(
        images=data["regions"] if regions else data["images"],
        image_mask=data["region_mask"] if regions else None,
        image_ids=data["image_ids"],
        caption_ids=enc.ids.reshape(shape), caption_mask=enc.attention_mask.reshape(shape),
        caption_valid=enc.valid_mask.reshape(shape), pad_id=tokenizer.pad_id, mask_id=tokenizer.mask_id,
        random_token_ids=np.setdiff1d(np.arange(tokenizer.vocab_size), sorted(tokenizer.special_ids)),
        pair_truth=functools.partial(shapesworld_pair_truth, data), **kwargs)


def drop_regions(rng: np.random.Generator, mask: np.ndarray, p: float, min_keep: int) -> np.ndarray:
    """New region mask: each valid region dropped with probability p, at least `min_keep` kept per row."""
    u = rng.random(mask.shape)
    drop = mask & (u < p)
    kept = (mask & ~drop).sum(1)
    ranks = np.argsort(np.argsort(np.where(mask, u, np.inf), axis=1), axis=1)
    protect = mask & (ranks < min_keep) & (kept < min_keep)[:, None]
    return mask & ~(drop & ~protect)


def drop_caption_tokens(rng: np.random.Generator, ids, attention, valid, *, p, mask_frac, random_frac, mask_id,
                        pad_id, random_ids, min_tokens):
    """Set Div caption augmentation on token ids; returns re-packed (ids, attention, valid)."""
    m, t = ids.shape
    u, w = rng.random((m, t)), rng.random((m, t))
    random_tok = random_ids[rng.integers(len(random_ids), size=(m, t))]
    act = valid & (u < p)
    to_mask = act & (w < mask_frac)
    to_random = act & (w >= mask_frac) & (w < mask_frac + random_frac)
    delete = act & (w >= mask_frac + random_frac)
    delete &= ((valid & ~delete).sum(1) >= min_tokens)[:, None]
    if to_mask.any() and mask_id is None:
        raise ValueError("caption_mask_frac > 0 needs a tokenizer with a mask token (CLIP BPE has none)")
    new = np.where(to_mask, mask_id if mask_id is not None else 0, np.where(to_random, random_tok, ids))
    keep = attention & ~delete
    order = np.argsort(~keep, axis=1, kind="stable")
    new = np.take_along_axis(new, order, 1)
    new_valid = np.take_along_axis(valid, order, 1)
    live = np.arange(t)[None, :] < keep.sum(1)[:, None]
    return np.where(live, new, pad_id).astype(ids.dtype), live, new_valid & live


def with_global_caption_image(batch: dict, process_index: int | None = None) -> dict:
    """`batch` with its local caption→image indices (`caption_image`, rows of this process's b images) made indices
    into the global batch of all processes (process p holds images [p·b, (p+1)·b)), as a step over the global batch
    needs them. A batch without `caption_image` is returned unchanged."""
    if "caption_image" not in batch:
        return batch
    if process_index is None:
        import jax
        process_index = jax.process_index()
    local_images = len(batch["example_valid"])
    return {**batch, "caption_image": (batch["caption_image"] + process_index * local_images).astype(np.int32)}


class BatchIterator(Iterator[dict]):
    """Endless (or `num_epochs`) iterator over batches; `position` = (epoch, step) of the next batch returned."""

    def __init__(self, source: InMemorySource, config: PipelineConfig = PipelineConfig(), start=(0, 0)):
        self.source, self.config = source, config
        if config.process_index is None or config.process_count is None:
            import jax
            pi, pc = jax.process_index(), jax.process_count()
        else:
            pi, pc = config.process_index, config.process_count
        if config.batch_size % pc:
            raise ValueError(f"batch_size {config.batch_size} is not divisible by process_count {pc}")
        if not 0 <= pi < pc:
            raise ValueError(f"process_index {pi} not in [0, {pc})")
        self.process_index, self.process_count = pi, pc
        n, b = len(source.images), config.batch_size
        self.steps_per_epoch = n // b if config.drop_remainder else -(-n // b)
        if self.steps_per_epoch == 0:
            raise ValueError(f"batch_size {b} > {n} examples with drop_remainder=True")
        if config.augment and config.caption_drop_prob > 0 and config.caption_mask_frac > 0 and source.mask_id is None:
            raise ValueError("caption_mask_frac > 0 needs a tokenizer with a mask token (CLIP BPE has none)")
        if config.pair_truth and source.pair_truth is None:
            raise ValueError("PipelineConfig.pair_truth (loss.false_negatives='ignore') needs a source that knows which "
                             "captions are true of which images (ShapesWorld); this source has no pair_truth")
        self.position = tuple(start)
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()
        self._thread = None

    # -- pure batch construction ---------------------------------------------------------------------------------
    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.source.images)
        if not self.config.shuffle:
            return np.arange(n)
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.config.seed, 0, epoch]))).permutation(n)

    def batch_at(self, epoch: int, step: int) -> dict:
        cfg, src = self.config, self.source
        if not 0 <= step < self.steps_per_epoch:
            raise ValueError(f"step {step} not in [0, {self.steps_per_epoch})")
        gb = cfg.batch_size
        idx = self._order(epoch)[step * gb:(step + 1) * gb]
        valid = np.ones(gb, bool)
        if len(idx) < gb:  # last partial batch: pad with row 0, flagged invalid
            valid[len(idx):] = False
            idx = np.concatenate([idx, np.zeros(gb - len(idx), idx.dtype)])
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([cfg.seed, 1, epoch, step])))
        b = gb // self.process_count
        local = slice(self.process_index * b, (self.process_index + 1) * b)
        c = src.caption_ids.shape[1]
        out = {"image_ids": src.image_ids[idx][local].astype(np.int64), "example_index": idx[local].astype(np.int64),
               "example_valid": valid[local]}
        if src.is_regions:
            mask = src.image_mask[idx]
            if cfg.augment and cfg.region_drop_prob > 0:
                mask = drop_regions(rng, mask, cfg.region_drop_prob, cfg.min_regions)
            mask = mask[local]
            out["image_feats"] = np.where(mask[..., None], src.images[idx[local]], 0).astype(np.float32)
            out["image_mask"] = mask
        else:
            out["images"] = src.images[idx[local]]
        t = src.caption_ids.shape[2]
        ids = src.caption_ids[idx].reshape(gb * c, t)
        att = src.caption_mask[idx].reshape(gb * c, t)
        val = src.caption_valid[idx].reshape(gb * c, t)
        if cfg.augment and cfg.caption_drop_prob > 0:
            ids, att, val = drop_caption_tokens(
                rng, ids, att, val, p=cfg.caption_drop_prob, mask_frac=cfg.caption_mask_frac,
                random_frac=cfg.caption_random_frac, mask_id=src.mask_id, pad_id=src.pad_id,
                random_ids=src.random_token_ids, min_tokens=cfg.min_caption_tokens)
        rows = slice(local.start * c, local.stop * c)
        out.update(caption_ids=ids[rows], caption_mask=att[rows], caption_valid=val[rows],
                   caption_image=np.repeat(np.arange(b, dtype=np.int32), c),
                   caption_uid=(out["image_ids"][:, None] * c + np.arange(c)).reshape(-1))
        if cfg.pair_truth:
            out["caption_true"] = src.pair_truth(idx, idx[local])
        if src.neg_ids is not None:
            li = idx[local]
            out.update(neg_caption_ids=src.neg_ids[li].reshape(b * c, t),
                       neg_caption_mask=src.neg_mask[li].reshape(b * c, t),
                       neg_caption_valid=src.neg_token_valid[li].reshape(b * c, t),
                       neg_valid=src.neg_valid[li].reshape(b * c) & np.repeat(valid[local], c))
        return out

    # -- iteration with prefetch ---------------------------------------------------------------------------------
    def _advance(self, pos):
        epoch, step = pos
        step += 1
        return (epoch + 1, 0) if step == self.steps_per_epoch else (epoch, step)

    def _finished(self, pos) -> bool:
        return self.config.num_epochs is not None and pos[0] >= self.config.num_epochs

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _producer(self, pos):
        try:
            while not self._stop.is_set() and not self._finished(pos):
                if not self._put((pos, self.batch_at(*pos))):
                    return
                pos = self._advance(pos)
            self._put(None)
        except BaseException as e:  # surfaced in the consumer thread
            self._put(e)

    def __next__(self) -> dict:
        if self._finished(self.position):
            raise StopIteration
        if self.config.prefetch <= 0:
            batch = self.batch_at(*self.position)
        else:
            if self._thread is None:
                self._queue = queue.Queue(maxsize=self.config.prefetch)
                self._thread = threading.Thread(target=self._producer, args=(self.position,), daemon=True)
                self._thread.start()
            item = self._queue.get()
            if item is None:
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            pos, batch = item
            assert pos == self.position
        self.position = self._advance(self.position)
        return batch

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None

    def __del__(self):
        stop = getattr(self, "_stop", None)  # absent when __init__ raised
        if stop is not None:
            stop.set()
