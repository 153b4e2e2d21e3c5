"""SCAN / VSE++ precomputed features: ``{split}_ims.npy`` + ``{split}_caps.txt`` (+ optional ``{split}_ids.txt``).

Layout of the SCAN release (``data/coco_precomp``, ``data/f30k_precomp``): ``{split}_ims.npy`` holds one feature
block per image, ``[n_images, 36, 2048]`` BUTD regions (or ``[n_images, d]`` global features in VSE++), and
``{split}_caps.txt`` one caption per line, the captions of image i being lines ``i*c .. i*c + c - 1`` with
``c = n_captions / n_images`` (SCAN's ``im_div``; 5 for COCO/F30K). COCO's ``testall`` is the 5K Karpathy test set
(5000 images / 25 000 captions); COCO 1K = five consecutive folds of 1000 images (``fold=k`` or
``RetrievalDataset.folds()``). Features are memory-mapped read-only; ``.npy`` files holding pickled objects are
refused (``allow_pickle=False``). NaN / inf features are refused (`check_finite`: one chunked pass over the memory
map, about 64 MB of extra memory whatever the split size), and so are repeated image ids in ``{split}_ids.txt``.
Splits read by separate calls are compared with `check_same_feature_dim` (train vs dev of one run).

Difference from SCAN's loader [default]: SCAN truncates ``dev`` to its first 5000 captions for speed during
training; this reader returns the whole split (use ``subset_images`` for the same effect).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mmjax.data.readers import _common
from mmjax.data.records import DataFormatError, RetrievalDataset

_FLOAT_DTYPES = (np.float16, np.float32, np.float64)
_SCAN_BYTES = 64 << 20  # bytes per isfinite chunk: bounded memory whatever the split size


def load_feature_array(path: Path, *, mmap: bool = True) -> np.ndarray:
    """A float feature array of rank 2 or 3 from a ``.npy`` file, never unpickling anything."""
    _common.require_file(path, "precomputed image features")
    # Read the header first: an object dtype means pickled payloads, refused before any loading is attempted, and
    # a header whose shape needs more bytes than the file holds (truncated or corrupt) is refused before np.load
    # tries to allocate that much (a damaged header can claim tens of GiB: MemoryError without a file name).
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            reader = {(1, 0): np.lib.format.read_array_header_1_0,
                      (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            # (format 3.0 only differs in the header encoding; np.load below still refuses objects.)
            header = reader(f) if reader is not None else None
            data_offset = f.tell()
    except ValueError as err:
        raise DataFormatError(f"{path}: not a .npy file ({err})") from None
    dtype = header[2] if header is not None else None
    if dtype is not None and dtype.hasobject:
        raise DataFormatError(f"{path}: holds pickled Python objects (dtype {dtype}); refused for safety. "
                              "Save the features as a plain float array.")
    if header is not None:
        shape = tuple(int(n) for n in header[0])
        needed = int(np.prod(shape, dtype=object)) * dtype.itemsize
        have = os.path.getsize(path) - data_offset
        if needed > have:
            raise DataFormatError(f"{path}: the .npy header declares shape {shape} of {dtype} ({needed} bytes of "
                                  f"data) but the file holds {have} bytes after the header: truncated or corrupt")
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise DataFormatError(f"{path}: not a readable .npy array ({err})") from None
    except MemoryError as err:
        raise MemoryError(f"{path}: the features do not fit in memory ({err}); read them with mmap=True") from None
    if not isinstance(arr, np.ndarray):  # np.load returns an NpzFile for .npz archives
        raise DataFormatError(f"{path}: expected a single .npy array, got {type(arr).__name__}")
    if arr.dtype.type not in _FLOAT_DTYPES:
        raise DataFormatError(f"{path}: feature dtype {arr.dtype} (shape {arr.shape}); expected float16/32/64")
    if arr.ndim not in (2, 3) or arr.shape[0] == 0 or 0 in arr.shape:
        raise DataFormatError(f"{path}: feature shape {arr.shape}; expected [n_images, d] or "
                              "[n_images, n_regions, d] with all sizes > 0")
    return arr


def check_finite(path: Path, features: np.ndarray, chunk_bytes: int = _SCAN_BYTES) -> None:
    """Raise `DataFormatError` naming ``path`` and the first image whose features hold NaN or +-inf.

    Reads ``features`` (typically a read-only memory map) in blocks of whole images of about ``chunk_bytes``, so
    the check costs one sequential pass and O(chunk) memory; a NaN row would otherwise poison every similarity
    and loss it touches without an error."""
    n = int(features.shape[0])
    row_bytes = max(1, features[:1].nbytes)
    step = max(1, chunk_bytes // row_bytes)
    for start in range(0, n, step):
        block = np.asarray(features[start:start + step])
        ok = np.isfinite(block).reshape(block.shape[0], -1).all(axis=1)
        if not ok.all():
            i = start + int(np.argmin(ok))
            bad = np.asarray(features[i]).reshape(-1)
            j = int(np.argmin(np.isfinite(bad)))
            raise DataFormatError(f"{path}: non-finite feature value {float(bad[j])!r} in image {i} (row {i} of {n}, "
                                  f"flat element {j} of {bad.size}); NaN/inf features are refused")


def _read_ids(path: Path, n_images: int, n_captions: int) -> tuple[str, ...]:
    ids = [ln.strip() for ln in _common.read_lines(path)]
    for lineno, v in enumerate(ids, start=1):
        if not v:
            raise DataFormatError(f"{path}:{lineno}: empty image id")
    if len(ids) == n_images:
        per = 1
    elif len(ids) == n_captions:  # one id per caption: must be constant within each image's caption group
        per = n_captions // n_images
        for i in range(n_images):
            group = ids[i * per:(i + 1) * per]
            if len(set(group)) != 1:
                raise DataFormatError(f"{path}:{i * per + 1}: ids of image {i}'s {per} captions differ: {group}")
    else:
        raise DataFormatError(f"{path}: {len(ids)} ids for {n_images} images / {n_captions} captions")
    # Two images with one id would both count as positives of each other's captions in id-aware losses/metrics.
    seen = _common.UniqueIds("image id")
    for i, v in enumerate(ids[::per]):
        seen.add(v, f"{path}:{i * per + 1} (image {i})")
    return tuple(ids[::per])


def check_same_feature_dim(datasets: Sequence[RetrievalDataset], names: Sequence[str] | None = None) -> int:
    """The common feature size of ``datasets`` (e.g. train and dev of one run), or a `DataFormatError` naming the
    two splits (and their source files) whose rank or last axis differ. Returns that last-axis size.

    Each `precomp` call checks one split; a model built on train's width fails late and obscurely on a dev split
    of another width, so the training side calls this once after reading every split it uses."""
    datasets = list(datasets)
    names = [d.split for d in datasets] if names is None else list(names)
    if len(names) != len(datasets) or not datasets:
        raise ValueError(f"check_same_feature_dim: {len(datasets)} datasets, {len(names)} names")
    for ds, name in zip(datasets, names):
        if ds.features is None:
            raise ValueError(f"check_same_feature_dim: {name!r} has image paths, not precomputed features")
    ref, ref_name = datasets[0], names[0]
    for ds, name in zip(datasets[1:], names[1:]):
        a, b = ref.features.shape, ds.features.shape
        if len(a) != len(b) or a[-1] != b[-1]:
            raise DataFormatError(
                f"feature size mismatch: split {name!r} ({_ims_source(ds)}) has features {b} but split "
                f"{ref_name!r} ({_ims_source(ref)}) has {a}; rank and last axis must agree")
    return int(ref.features.shape[-1])


def _ims_source(ds: RetrievalDataset) -> str:
    return next((s for s in ds.sources if s.endswith(".npy")), ds.name or "in memory")


def precomp(data_dir: str | os.PathLike, *, split: str = "testall", fold: int | None = None,
            num_folds: int = 5, feature_dim: int | None = None, mmap: bool = True,
            check_finite_values: bool = True) -> RetrievalDataset:
    """Read one split of a SCAN/VSE++ ``*_precomp`` directory.

    Args:
      data_dir: the directory holding ``{split}_ims.npy`` and ``{split}_caps.txt`` (e.g. ``data/coco_precomp``).
      split: ``'train'``, ``'dev'``, ``'test'`` or ``'testall'`` (COCO 5K).
      fold: None for the whole split, else k in [0, num_folds): the k-th consecutive image fold (COCO 1K).
      feature_dim: if set, the last feature axis must have this size (2048 for BUTD).
      mmap: memory-map the features read-only (default) instead of reading them into memory.
      check_finite_values: scan the features for NaN/inf (`check_finite`; one sequential read of the file).

    Returns a `RetrievalDataset` with ``features`` set; image ids come from ``{split}_ids.txt`` when present,
    else they are the image indices as strings.
    """
    root = _common.require_dir(data_dir, "precomp data directory")
    ims_path, caps_path, ids_path = (root / f"{split}_{s}" for s in ("ims.npy", "caps.txt", "ids.txt"))
    _common.require_file(caps_path, "precomputed captions")
    features = load_feature_array(ims_path, mmap=mmap)
    if feature_dim is not None and features.shape[-1] != feature_dim:
        raise DataFormatError(f"{ims_path}: feature shape {features.shape}; expected last axis {feature_dim}")
    if check_finite_values:
        check_finite(ims_path, features)
    captions = []
    for lineno, line in enumerate(_common.read_lines(caps_path), start=1):
        captions.append(_common.caption(line, f"{caps_path}:{lineno}"))
    n_images, n_captions = int(features.shape[0]), len(captions)
    if n_captions == 0 or n_captions % n_images:
        raise DataFormatError(f"{caps_path}: {n_captions} captions is not a positive multiple of the "
                              f"{n_images} images in {ims_path} (shape {features.shape})")
    per_image = n_captions // n_images
    image_ids = (_read_ids(ids_path, n_images, n_captions) if ids_path.is_file()
                 else tuple(str(i) for i in range(n_images)))
    sources = tuple(str(p) for p in (ims_path, caps_path, ids_path) if p.is_file())
    ds = RetrievalDataset(split=split, captions=tuple(captions),
                          caption_to_image=np.arange(n_captions) // per_image, image_ids=image_ids,
                          features=features, name=f"precomp:{root.name}", sources=sources)
    if fold is None:
        return ds
    if not 0 <= fold < num_folds:
        raise ValueError(f"fold={fold} outside [0, {num_folds})")
    return ds.folds(num_folds)[fold]
