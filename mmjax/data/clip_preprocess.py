"""CLIP image preprocessing in numpy + Pillow, as OpenAI CLIP and Hugging Face `CLIPImageProcessor` do it.

Steps for one image (`preprocess_image`):

1. optional bbox crop ``(x, y, w, h)`` → Pillow box ``(x, y, x + w, y + h)`` (ARO's crop; see
   `mmjax.data.readers.open_image`), done first, on the decoded image;
2. convert to RGB (Pillow ``convert("RGB")``, as OpenAI's ``_convert_image_to_rgb``);
3. resize the SHORTEST side to ``image_size`` with Pillow bicubic; the long side becomes
   ``int(image_size * long / short)`` (truncated, as HF `get_resize_output_image_size` and torchvision ``Resize``);
4. center crop ``image_size × image_size`` with top/left = ``(extent − image_size) // 2`` (HF's rule; torchvision's
   ``round`` can differ by one pixel when the surplus is odd);
5. scale to [0, 1] (÷ 255) and normalise with the CLIP mean/std per channel.

Output: float32 NHWC (``[image_size, image_size, 3]`` per image, ``[B, S, S, 3]`` per batch) — the layout
`mmjax.models.clip.CLIPModel.encode_image` takes. ``image_size`` must be the checkpoint's
``vision_config.image_size`` (224 for the OpenAI ViT-B/32, 16 for the test CLIP).

`ClipImageSequence` is a lazy sequence of preprocessed images for `mmjax.models.feature_cache.write_feature_cache`:
images are decoded one block at a time (a thread pool decodes a block in parallel; Pillow releases the GIL), so a
dataset never sits in memory whole.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mmjax.data.readers.images import open_image
from mmjax.data.records import BBox

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def resize_shortest_side(image, image_size: int):
    """Pillow image → Pillow image whose shorter side is `image_size` (bicubic; long side truncated)."""
    from PIL import Image  # noqa: PLC0415

    width, height = image.size
    if width < 1 or height < 1:
        raise ValueError(f"cannot resize an empty image of size {width}x{height}")
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(image_size * long / short)
    new_size = (image_size, new_long) if width <= height else (new_long, image_size)  # Pillow sizes are (w, h)
    return image.resize(new_size, resample=Image.Resampling.BICUBIC)


def center_crop(pixels: np.ndarray, image_size: int) -> np.ndarray:
    """[H, W, C] → [image_size, image_size, C]; both sides must be at least `image_size` (true after resizing)."""
    height, width = pixels.shape[:2]
    if height < image_size or width < image_size:
        raise ValueError(f"center_crop: image {height}x{width} is smaller than the crop {image_size}")
    top, left = (height - image_size) // 2, (width - image_size) // 2
    return pixels[top:top + image_size, left:left + image_size]


def normalise(pixels: np.ndarray, mean=CLIP_MEAN, std=CLIP_STD) -> np.ndarray:
    """uint8 [..., 3] → float32 (x / 255 − mean) / std (scaling in float64 first, as HF's `rescale`)."""
    scaled = (np.asarray(pixels).astype(np.float64) * (1 / 255)).astype(np.float32)
    return (scaled - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


def preprocess_image(image, image_size: int, *, bbox: BBox | None = None, mean=CLIP_MEAN,
                     std=CLIP_STD) -> np.ndarray:
    """One image → float32 [image_size, image_size, 3], normalised.

    `image`: a path, a `mmjax.data.records.CompositionalRecord` (its bbox is used unless `bbox` is given), a Pillow
    image, or a uint8 array [H, W] / [H, W, 3|4].
    """
    from PIL import Image  # noqa: PLC0415

    if not isinstance(image_size, (int, np.integer)) or image_size < 1:
        raise ValueError(f"image_size must be a positive int, got {image_size!r}")
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] not in (3, 4)):
            raise ValueError(f"image array must be uint8 [H, W] or [H, W, 3|4], got {image.dtype} {image.shape}")
        image = Image.fromarray(image)
    if isinstance(image, Image.Image):
        image = image.convert("RGB")
        if bbox is not None:
            x, y, w, h = bbox
            image = image.crop((x, y, x + w, y + h))
    else:
        try:
            image = open_image(image, bbox)  # path or record; crops, converts to RGB
        except FileNotFoundError:
            raise
        except OSError as err:  # truncated / undecodable files: name the file (Pillow's errors may not)
            raise OSError(f"cannot decode image {getattr(image, 'image', image)!s}: {err}") from err
    pixels = np.asarray(resize_shortest_side(image, int(image_size)))
    return normalise(center_crop(pixels, int(image_size)), mean, std)


def preprocess_batch(images: Sequence, image_size: int, *, bboxes: Sequence[BBox | None] | None = None,
                     executor: ThreadPoolExecutor | None = None) -> np.ndarray:
    """Several images (anything `preprocess_image` takes) → float32 [B, S, S, 3]."""
    bboxes = [None] * len(images) if bboxes is None else list(bboxes)
    if len(bboxes) != len(images):
        raise ValueError(f"{len(bboxes)} bboxes for {len(images)} images")
    if len(images) == 0:
        return np.zeros((0, image_size, image_size, 3), np.float32)

    def one(k):
        return preprocess_image(images[k], image_size, bbox=bboxes[k])

    out = list(executor.map(one, range(len(images)))) if executor is not None else [one(k) for k in range(len(images))]
    return np.stack(out)


class ClipImageSequence(Sequence):
    """Lazy, read-once-per-block sequence of preprocessed images: ``seq[i]`` is float32 [S, S, 3].

    Accessing index i decodes the whole block of `block_size` images that holds i (in parallel with `num_workers`
    threads) and keeps only that block, so sequential readers — `write_feature_cache` reads in order, batch by batch
    — decode every image once and hold at most one block. Random access works but re-decodes blocks.
    """

    def __init__(self, images: Sequence, image_size: int, *, bboxes: Sequence[BBox | None] | None = None,
                 block_size: int = 64, num_workers: int | None = None):
        if bboxes is not None and len(bboxes) != len(images):
            raise ValueError(f"{len(bboxes)} bboxes for {len(images)} images")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.images, self.bboxes, self.image_size = images, bboxes, int(image_size)
        self.block_size = block_size
        self.num_workers = num_workers if num_workers is not None else min(8, os.cpu_count() or 1)
        self._executor = ThreadPoolExecutor(self.num_workers) if self.num_workers > 1 else None
        self._block_start: int | None = None
        self._block: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            rows = [self[i] for i in range(*index.indices(len(self)))]
            return np.stack(rows) if rows else np.zeros((0, self.image_size, self.image_size, 3), np.float32)
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"image index {index} out of range for {len(self)} images")
        start = index - index % self.block_size
        if self._block_start != start:
            stop = min(start + self.block_size, len(self))
            self._block = preprocess_batch(
                [self.images[k] for k in range(start, stop)], self.image_size,
                bboxes=None if self.bboxes is None else [self.bboxes[k] for k in range(start, stop)],
                executor=self._executor)
            self._block_start = start
        return self._block[index - start]

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None
        self._block = None
