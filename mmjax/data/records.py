"""Record types shared by the dataset readers (`mmjax.data.readers`) and the evaluators.

Two shapes of data come out of the official benchmark files:

* **Compositional records** (ARO, SugarCrepe, What's Up, ABC-6K, CLEVR/PUG, Winoground, NegCLIP TSV): one image
  (optionally a bbox crop of it), m candidate captions and the index of the gold one. The evaluator scores s(I, c_k)
  for every candidate and applies the benchmark's tie policy; the image-replacement controls (Shuffle / Fixed) swap
  the image while keeping captions and gold index, so every record carries an image *identity* to derange on.
  `task` is the unit the papers report an accuracy for; `subgroup` is the group a macro average runs over
  (ARO VG-Relation: the relation name; VG-Attribution: "a1_a2"; SugarCrepe: the subset; What's Up: one/two objects;
  Winoground: `collapsed_tag`). Readers never apply the macro conventions themselves (symmetric-relation exclusion,
  >= 25-sample attribute pairs): they keep the tags and the metric code filters.
* **Retrieval datasets** (SCAN precomputed features, Karpathy JSON): n images (paths or a feature array), N captions
  and a caption -> image index.

Readers that skip anything return the counts in `skipped` (reason -> count) and log a warning; nothing is dropped
silently.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

BBox = tuple[float, float, float, float]


class DataFormatError(ValueError):
    """A data file does not follow its official format. The message names the file (and line or field)."""


def _frozen_mapping(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(m or {}))


@dataclasses.dataclass(frozen=True)
class CompositionalRecord:
    """One (image, candidate captions, gold index) test case.

    Attributes:
      image: absolute path of the image file (or an id when the reader was told not to resolve paths).
      captions: the candidates in the benchmark's own order (e.g. ARO VG tasks store ``(false, true)``).
      correct: index of the gold caption in ``captions``.
      task: reported unit, e.g. ``'vg_relation'``, ``'coco_order'``, ``'sugarcrepe'``, ``'coco_spatial'``.
      subgroup: macro-average group within the task (see module docstring), or None.
      bbox: ``(x, y, w, h)`` in pixels of the region to crop before encoding (ARO VG tasks), or None.
        `mmjax.data.readers.open_image` crops ``(x, y, x + w, y + h)`` as the ARO loader does.
      image_id: identity of the source image for the replacement controls (two records with the same identity show
        the same picture, whatever their bboxes). None means "use ``image``".
      meta: reader-specific tags the metrics need (e.g. ``relation``, ``attributes``, ``example_id``); read-only.
    """

    image: str
    captions: tuple[str, ...]
    correct: int
    task: str
    subgroup: str | None = None
    bbox: BBox | None = None
    image_id: str | None = None
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        captions = tuple(self.captions)
        object.__setattr__(self, "captions", captions)
        if not captions:
            raise ValueError(f"CompositionalRecord({self.task!r}, {self.image!r}): no candidate captions")
        for k, c in enumerate(captions):
            if not isinstance(c, str) or not c.strip():
                raise ValueError(f"CompositionalRecord({self.task!r}, {self.image!r}): caption {k} is empty "
                                 f"or not a string: {c!r}")
        if not isinstance(self.correct, (int, np.integer)) or not 0 <= int(self.correct) < len(captions):
            raise ValueError(f"CompositionalRecord({self.task!r}, {self.image!r}): correct={self.correct!r} is not "
                             f"an index into {len(captions)} captions")
        object.__setattr__(self, "correct", int(self.correct))
        if self.bbox is not None:
            bbox = tuple(float(v) for v in self.bbox)
            if len(bbox) != 4 or not all(math.isfinite(v) for v in bbox) or bbox[2] <= 0 or bbox[3] <= 0:
                raise ValueError(f"CompositionalRecord({self.task!r}, {self.image!r}): bbox must be finite "
                                 f"(x, y, w, h) with w, h > 0, got {self.bbox!r}")
            object.__setattr__(self, "bbox", bbox)
        object.__setattr__(self, "meta", _frozen_mapping(self.meta))

    @property
    def identity(self) -> str:
        """Image identity used by the Shuffle/Fixed controls: ``image_id`` when set, else ``image``."""
        return self.image_id if self.image_id is not None else self.image

    @property
    def gold_caption(self) -> str:
        return self.captions[self.correct]


@dataclasses.dataclass(frozen=True)
class CompositionalDataset(Sequence[CompositionalRecord]):
    """The records one reader call produced, plus provenance and what was skipped (reason -> count)."""

    records: tuple[CompositionalRecord, ...]
    name: str
    sources: tuple[str, ...] = ()
    skipped: Mapping[str, int] = dataclasses.field(default_factory=dict)
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", tuple(self.records))
        object.__setattr__(self, "skipped", _frozen_mapping(self.skipped))
        object.__setattr__(self, "meta", _frozen_mapping(self.meta))

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):  # type: ignore[override]
        return self.records[i]

    def __iter__(self) -> Iterator[CompositionalRecord]:
        return iter(self.records)

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())

    def tasks(self) -> tuple[str, ...]:
        return tuple(sorted({r.task for r in self.records}))


@dataclasses.dataclass(frozen=True)
class RetrievalDataset:
    """Images x captions for retrieval (R@K). Caption j belongs to image ``caption_to_image[j]``.

    Exactly one of ``images`` (absolute image paths, Karpathy JSON) and ``features`` (an array of shape
    ``[n_images, ...]``, SCAN precomputed, usually a read-only ``np.memmap``) is set.
    """

    split: str
    captions: tuple[str, ...]
    caption_to_image: np.ndarray
    image_ids: tuple[str, ...]
    images: tuple[str, ...] | None = None
    features: np.ndarray | None = None
    name: str = ""
    sources: tuple[str, ...] = ()
    skipped: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        c2i = np.asarray(self.caption_to_image, dtype=np.int64)
        c2i.setflags(write=False)
        object.__setattr__(self, "caption_to_image", c2i)
        object.__setattr__(self, "captions", tuple(self.captions))
        object.__setattr__(self, "image_ids", tuple(self.image_ids))
        object.__setattr__(self, "skipped", _frozen_mapping(self.skipped))
        if (self.images is None) == (self.features is None):
            raise ValueError("RetrievalDataset needs exactly one of `images` and `features`")
        if self.images is not None:
            object.__setattr__(self, "images", tuple(self.images))
        n = self.num_images
        if len(self.image_ids) != n:
            raise ValueError(f"RetrievalDataset: {len(self.image_ids)} image ids for {n} images")
        if c2i.shape != (len(self.captions),):
            raise ValueError(f"RetrievalDataset: caption_to_image shape {c2i.shape} for {len(self.captions)} captions")
        if c2i.size and (c2i.min() < 0 or c2i.max() >= n):
            raise ValueError(f"RetrievalDataset: caption_to_image values outside [0, {n})")

    @property
    def num_images(self) -> int:
        return len(self.images) if self.images is not None else int(self.features.shape[0])

    @property
    def num_captions(self) -> int:
        return len(self.captions)

    @property
    def feature_dim(self) -> int | None:
        """Size of the last feature axis (precomputed features), None for image paths."""
        return None if self.features is None else int(self.features.shape[-1])

    def image_to_captions(self) -> list[np.ndarray]:
        """For each image, the indices of its captions (ascending)."""
        order = np.argsort(self.caption_to_image, kind="stable")
        bounds = np.searchsorted(self.caption_to_image[order], np.arange(self.num_images + 1))
        return [order[bounds[i]:bounds[i + 1]] for i in range(self.num_images)]

    def subset_images(self, start: int, stop: int, *, split: str | None = None) -> "RetrievalDataset":
        """Images [start, stop) and all their captions, re-indexed (e.g. one COCO 1K fold of the 5K test set)."""
        if not 0 <= start < stop <= self.num_images:
            raise ValueError(f"subset_images({start}, {stop}) outside [0, {self.num_images}]")
        keep = np.flatnonzero((self.caption_to_image >= start) & (self.caption_to_image < stop))
        return dataclasses.replace(
            self,
            split=split or f"{self.split}[{start}:{stop}]",
            captions=tuple(self.captions[j] for j in keep),
            caption_to_image=self.caption_to_image[keep] - start,
            image_ids=self.image_ids[start:stop],
            images=None if self.images is None else self.images[start:stop],
            features=None if self.features is None else self.features[start:stop],
        )

    def folds(self, num_folds: int = 5) -> list["RetrievalDataset"]:
        """Consecutive equal image folds (COCO 1K: ``testall`` 5000 images -> 5 x 1000 images / 5000 captions)."""
        if num_folds < 1 or self.num_images % num_folds:
            raise ValueError(f"{self.num_images} images cannot be split into {num_folds} equal folds")
        size = self.num_images // num_folds
        return [self.subset_images(k * size, (k + 1) * size, split=f"{self.split}/fold{k}") for k in range(num_folds)]
