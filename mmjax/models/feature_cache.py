"""Frozen-encoder feature cache: run the encoders over a dataset once, then train heads from disk.

Format (docs/design.md#feature-cache), one directory:

    img_global.npy   [N_img, d]            img_patches.npy [N_img, N, d]        (float16 by default)
    txt_global.npy   [N_txt, d]            txt_tokens.npy  [N_txt, L, d]        txt_valid.npy [N_txt, L] bool
    records.jsonl    one JSON object per record (optional): "image" index, "pos" text index, "neg" text index or −1,
                     optionally "image_id" (identity g) and the texts
    meta.json        sizes, dtype, L (= min(max_tokens, context length)), truncation counts, model config;
                     written LAST, so a directory without it is an incomplete cache

Features are the raw (un-normalised) encoder outputs; the scorer normalises them after casting to float32. L_max is
`flowclip.max_tokens` (32): token states and valid flags past L are dropped and the dropped valid tokens are counted
in meta.json. Positives and negatives share the text arrays.

Writing streams: each `.npy` gets its header for the final shape up front and then batches are appended in order,
so memory holds one batch, whatever the dataset size. Reading opens every array with
`np.load(mmap_mode="r", allow_pickle=False)` and gathers batches on demand.
"""

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import jax
import numpy as np

from mmjax.batching import batched_apply
from mmjax.data.tokenizers import check_texts
from mmjax.jsonl import read_jsonl
from mmjax.flowclip.options import DEFAULTS

FORMAT = "mmjax.feature_cache"
VERSION = 1
IMAGE_ARRAYS = ("img_global", "img_patches")
TEXT_ARRAYS = ("txt_global", "txt_tokens", "txt_valid")

ImageEncoder = Callable[[np.ndarray], Mapping[str, Any]]  # NHWC batch → {"global", "patches"}
TextEncoder = Callable[[list[str]], Mapping[str, Any]]     # strings → {"global", "tokens", "valid"}


# ----------------------------------------------------------------------------------------------------------- writing

class _NpyStreamWriter:
    """Writes a C-order `.npy` of known final shape by appending row blocks (no memory beyond one block)."""

    def __init__(self, path: str, shape: tuple[int, ...], dtype):
        self.path, self.shape, self.dtype = path, tuple(shape), np.dtype(dtype)
        self.rows = 0
        self._file = open(path, "wb")
        np.lib.format.write_array_header_1_0(self._file, {
            "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape})

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.shape[1:] or self.rows + len(block) > self.shape[0]:
            raise ValueError(f"{self.path}: block {block.shape} does not fit array {self.shape} at row {self.rows}")
        self._file.write(block.tobytes())
        self.rows += len(block)

    def close(self) -> None:
        self._file.close()
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.path}: wrote {self.rows} rows, expected {self.shape[0]}")


def _take(items: Sequence, start: int, stop: int) -> np.ndarray:
    if isinstance(items, np.ndarray):
        return np.asarray(items[start:stop])
    return np.stack([np.asarray(items[i]) for i in range(start, stop)])


def _to_storage(name: str, value, dtype) -> np.ndarray:
    value = np.asarray(value)
    if value.dtype == bool:
        return value
    with np.errstate(over="ignore"):  # overflow is detected and reported just below
        stored = value.astype(dtype)
    if not np.all(np.isfinite(stored)):  # float16 overflows above 65504: refuse rather than store inf
        raise ValueError(f"{name}: non-finite values after casting to {np.dtype(dtype).name} "
                         f"(max |x| = {np.nanmax(np.abs(value)):.4g})")
    return stored


def _check_records(records: Iterable[Mapping[str, Any]], num_images: int, num_texts: int) -> list[str]:
    lines = []
    for n, record in enumerate(records):
        for key, low, high in (("image", 0, num_images), ("pos", 0, num_texts), ("neg", -1, num_texts)):
            if key in record and not (isinstance(record[key], (int, np.integer)) and low <= record[key] < high):
                raise ValueError(f"record {n}: {key!r} = {record[key]!r} outside [{low}, {high})")
        lines.append(json.dumps(dict(record), default=lambda x: x.item() if isinstance(x, np.generic) else str(x)))
    return lines


def write_feature_cache(directory: str | os.PathLike, images: Sequence, texts: Sequence[str], *,
                        encode_image: ImageEncoder, encode_text: TextEncoder,
                        records: Iterable[Mapping[str, Any]] | None = None, batch_size: int = 64,
                        max_tokens: int = DEFAULTS.max_tokens, dtype=np.float16, overwrite: bool = False,
                        extra_meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Encode every image and text once and write the cache; returns the meta dict (also in meta.json).

    `images`: a sequence of NHWC pixel arrays (or one [N, H, W, C] array, e.g. a memmap); `texts`: strings. Each
    encoder sees batches of at most `batch_size`; `encode_text` returns token states for its full context and the
    cache keeps the first `max_tokens` positions.
    """
    directory = os.fspath(directory)
    if os.path.exists(directory) and os.listdir(directory) and not overwrite:
        raise FileExistsError(f"{directory} is not empty (pass overwrite=True to replace a cache)")
    os.makedirs(directory, exist_ok=True)
    # meta.json first: the directory is an incomplete cache until the new one is written; stale records go too.
    for name in ("meta.json", "records.jsonl", *(f"{a}.npy" for a in IMAGE_ARRAYS + TEXT_ARRAYS)):
        if os.path.exists(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    num_images, num_texts = len(images), len(texts)
    if num_images == 0 or num_texts == 0:
        raise ValueError(f"need at least one image and one text (got {num_images}, {num_texts})")
    record_lines = _check_records(records, num_images, num_texts) if records is not None else None

    writers: dict[str, _NpyStreamWriter] = {}

    def write(name: str, value, shape_tail, array_dtype):
        if name not in writers:
            total = num_images if name.startswith("img_") else num_texts
            writers[name] = _NpyStreamWriter(os.path.join(directory, f"{name}.npy"), (total, *shape_tail),
                                             array_dtype)
        writers[name].append(value)

    for start in range(0, num_images, batch_size):
        out = encode_image(_take(images, start, min(start + batch_size, num_images)))
        g = _to_storage("img_global", out["global"], dtype)
        p = _to_storage("img_patches", out["patches"], dtype)
        write("img_global", g, g.shape[1:], dtype)
        write("img_patches", p, p.shape[1:], dtype)

    truncated_tokens = truncated_texts = 0
    text_length = None
    for start in range(0, num_texts, batch_size):
        out = encode_text([str(t) for t in texts[start:start + batch_size]])
        valid = np.asarray(out["valid"], bool)
        text_length = min(max_tokens, valid.shape[1])
        dropped = valid[:, text_length:].sum(1)
        truncated_tokens += int(dropped.sum())
        truncated_texts += int((dropped > 0).sum())
        g = _to_storage("txt_global", out["global"], dtype)
        t = _to_storage("txt_tokens", np.asarray(out["tokens"])[:, :text_length], dtype)
        write("txt_global", g, g.shape[1:], dtype)
        write("txt_tokens", t, t.shape[1:], dtype)
        write("txt_valid", valid[:, :text_length], (text_length,), bool)
    for writer in writers.values():
        writer.close()

    if record_lines is not None:
        with open(os.path.join(directory, "records.jsonl"), "w") as f:
            f.writelines(line + "\n" for line in record_lines)
    meta = {
        "format": FORMAT, "version": VERSION, "dtype": np.dtype(dtype).name,
        "num_images": num_images, "num_texts": num_texts, "num_records": None if records is None else len(record_lines),
        "dim": writers["img_global"].shape[1], "num_patches": writers["img_patches"].shape[1],
        "text_length": text_length, "max_tokens": max_tokens,
        "truncated_valid_tokens": truncated_tokens, "truncated_texts": truncated_texts,
        "arrays": {name: {"shape": list(w.shape), "dtype": w.dtype.name} for name, w in writers.items()},
        **(dict(extra_meta) if extra_meta else {}),
    }
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def clip_encoders(model, params, tokenizer, *, batch_size: int = 64) -> tuple[ImageEncoder, TextEncoder]:
    """Jitted encoders for `write_feature_cache` from a `mmjax.models.clip.CLIPModel` (as `load_hf_clip` returns).

    Batches are padded to `batch_size` and texts to the full context length so that one compilation serves the
    whole dataset (the text tower is causal, so padding length does not change any state before EOT).
    """
    variables = {"params": params}
    context = model.config.text_config.max_position_embeddings
    eot = model.config.text_config.eot_token_id
    image_fn = jax.jit(partial(model.apply, method="encode_image"))
    text_fn = jax.jit(partial(model.apply, method="encode_text"))

    def padded(fn, *arrays):
        # Fixed-shape batches (one compilation); edge padding, never zeros (an all-padding text row is invalid).
        return batched_apply(partial(fn, variables), arrays, batch_size=batch_size, name=None, jit=False)

    def encode_image(pixels: np.ndarray):
        return padded(image_fn, np.asarray(pixels, np.float32))

    def encode_text(strings: list[str]):
        check_texts(strings)  # a NUL character: ValueError naming the text's index
        enc = tokenizer(strings, padding="max_length", max_length=context, truncation=True, return_tensors="np")
        ids = enc["input_ids"].astype(np.int32)
        if not np.all((ids == eot).any(1)):
            raise ValueError(f"some tokenised texts have no EOT id {eot}; the tokenizer must add special tokens")
        return padded(text_fn, ids, enc["attention_mask"].astype(np.int32))

    return encode_image, encode_text


# ----------------------------------------------------------------------------------------------------------- reading

class FeatureCache:
    """Read-only view of a cache directory; arrays are memory-mapped and copied only batch by batch."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        meta_path = os.path.join(self.directory, "meta.json")
        if not os.path.isfile(meta_path):
            raise FileNotFoundError(f"no meta.json in {self.directory}: not a feature cache, or an incomplete one")
        with open(meta_path) as f:
            self.meta = json.load(f)
        if self.meta.get("format") != FORMAT or self.meta.get("version") != VERSION:
            raise ValueError(f"{meta_path}: format {self.meta.get('format')!r} v{self.meta.get('version')}, "
                             f"expected {FORMAT!r} v{VERSION}")
        self.arrays: dict[str, np.ndarray] = {}
        for name in IMAGE_ARRAYS + TEXT_ARRAYS:
            path = os.path.join(self.directory, f"{name}.npy")
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            want = self.meta["arrays"][name]
            if list(array.shape) != want["shape"] or array.dtype.name != want["dtype"]:
                raise ValueError(f"{path}: shape {array.shape} dtype {array.dtype} but meta.json says "
                                 f"{tuple(want['shape'])} {want['dtype']}")
            self.arrays[name] = array

    @property
    def num_images(self) -> int:
        return self.meta["num_images"]

    @property
    def num_texts(self) -> int:
        return self.meta["num_texts"]

    def images(self, indices, dtype=np.float32) -> dict[str, np.ndarray]:
        """{"global": [b, d], "patches": [b, N, d]} for integer `indices` (cast to `dtype`; None keeps storage)."""
        idx = np.asarray(indices)
        return {"global": self._gather("img_global", idx, dtype), "patches": self._gather("img_patches", idx, dtype)}

    def texts(self, indices, dtype=np.float32) -> dict[str, np.ndarray]:
        """{"global": [b, d], "tokens": [b, L, d], "valid": bool [b, L]} for integer `indices`."""
        idx = np.asarray(indices)
        return {"global": self._gather("txt_global", idx, dtype), "tokens": self._gather("txt_tokens", idx, dtype),
                "valid": self._gather("txt_valid", idx, None)}

    def texts_global(self, indices, dtype=np.float32) -> np.ndarray:
        """[b, d]: the global features alone of texts `indices` (no token arrays read)."""
        return self._gather("txt_global", np.asarray(indices), dtype)

    def records(self) -> list[dict[str, Any]]:
        path = os.path.join(self.directory, "records.jsonl")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: this cache was written without records")
        return read_jsonl(path, strict=True)  # records must be whole: a broken line is an error naming it

    def _gather(self, name: str, idx: np.ndarray, dtype) -> np.ndarray:
        array = self.arrays[name]
        # Sorted unique reads keep mmap access sequential; the inverse map restores the requested order.
        unique, inverse = np.unique(idx, return_inverse=True)
        out = np.asarray(array[unique])[inverse.reshape(idx.shape)]
        return out if dtype is None else out.astype(dtype)
