"""Encode COCO (Karpathy splits) with a frozen Hugging Face CLIP into Flow-CLIP feature caches
(docs/design.md#feature-cache, docs/design.md#hard-negatives, docs/design.md#flowclip-training).

    python scripts/cache_clip_features.py --clip_dir /data/clip-vit-base-patch32 \
        --karpathy_json /data/coco/dataset_coco.json --image_root /data/coco \
        --negclip_tsv /data/negclip/train_neg_clip.tsv --out /data/caches/coco_b32
    python train.py --config configs/flowclip_coco.py:flowclip_cimr --workdir workdir/fc_coco_cimr \
        --config.data.cache_dir=/data/caches/coco_b32

Writes one `mmjax.models.feature_cache` directory per split under `--out`:

* ``out/train``: Karpathy train + restval, the first 5 captions of every image, one record per caption
  ``{"image", "pos", "image_id" (cocoid), "pos_text"}`` plus ``"neg"``/``"neg_text"`` when the NegCLIP TSV has a
  hard negative for that caption. Matching key: (image file NAME, caption normalised as LABCLIP's ``pre_caption`` —
  lower case, ``.!"()*#:;~`` → space, collapsed whitespace). The file name alone identifies a COCO image
  (``COCO_train2014_000000000009.jpg``), so TSV paths may be absolute or relative to any root. Per caption the
  first negative (``--neg_pick first``, spec default) or a seeded random one (``random``) is taken among those whose
  normalised text differs from the positive. Captions without a usable negative keep their record without "neg"
  (the head masks them); every count — matched, unmatched, unused TSV rows, duplicate TSV keys — is printed and
  stored in ``meta.json["negatives"]``. Without ``--negclip_tsv`` no record has a negative.
* ``out/val`` (and any other split in ``--splits``): the Karpathy split, 5 captions per image, no negatives — the
  retrieval R@K set of the head trainer.

Texts: the captions in record order, then the distinct negative strings. Images are read, preprocessed
(`mmjax.data.clip_preprocess`, at the checkpoint's ``vision_config.image_size``) and encoded one batch at a time;
arrays are float16 and text states keep ``max_tokens`` positions (`flowclip.max_tokens`). Progress (rate, ETA) is printed per phase.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mmjax.batching import progress
from mmjax.data.clip_preprocess import CLIP_MEAN, CLIP_STD, ClipImageSequence
from mmjax.data.readers import karpathy, negclip_tsv
from mmjax.data.readers._common import pre_caption
from mmjax.flowclip.options import DEFAULTS
from mmjax.models.feature_cache import clip_encoders, write_feature_cache
from mmjax.models.hf import load_hf_clip

NEG_PICKS = ("first", "random")


def caption_key(image_path: str, caption: str) -> tuple[str, str]:
    """(image file name, normalised caption): how Karpathy captions and NegCLIP rows are matched."""
    return os.path.basename(image_path.strip()), pre_caption(caption, max_words=10**9)


def read_negclip_negatives(tsv_path: str | os.PathLike) -> tuple[dict[tuple[str, str], tuple[str, ...]], dict]:
    """NegCLIP TSV → ({caption_key: negative captions in file order}, counts). The first row of a repeated key
    wins; repeats are counted, never merged."""
    dataset = negclip_tsv(tsv_path, None, missing_images="unchecked")  # only text is needed here
    negatives: dict[tuple[str, str], tuple[str, ...]] = {}
    duplicates = 0
    for record in dataset:
        key = caption_key(record.image, record.captions[0])
        if key in negatives:
            duplicates += 1
            continue
        negatives[key] = tuple(record.captions[1:])
    return negatives, {"tsv_rows": len(dataset), "tsv_duplicate_keys": duplicates,
                       "tsv_rows_without_negative": int(dataset.meta.get("rows_without_negative", 0))}


def attach_negatives(image_paths: Sequence[str], captions: Sequence[str], caption_to_image: Sequence[int],
                     negatives: dict[tuple[str, str], tuple[str, ...]] | None, *, neg_pick: str = "first",
                     seed: int = 0) -> tuple[list[str | None], dict[str, int]]:
    """Per caption, its hard-negative text or None, and the matching counts (nothing is dropped silently)."""
    if neg_pick not in NEG_PICKS:
        raise ValueError(f"neg_pick must be one of {NEG_PICKS}, got {neg_pick!r}")
    counts = collections.Counter(captions=len(captions))
    if negatives is None:
        counts["without_negative_no_tsv"] = len(captions)
        return [None] * len(captions), dict(counts)
    rng = np.random.default_rng(seed)
    picked: list[str | None] = []
    used_keys = set()
    for caption, owner in zip(captions, caption_to_image):
        key = caption_key(image_paths[owner], caption)
        candidates = negatives.get(key)
        if candidates is None:
            counts["without_negative_unmatched"] += 1
            picked.append(None)
            continue
        used_keys.add(key)
        usable = [c for c in candidates if pre_caption(c, max_words=10**9) != key[1]]
        counts["negatives_equal_to_positive"] += len(candidates) - len(usable)
        if not usable:
            counts["without_negative_empty_or_identical"] += 1
            picked.append(None)
            continue
        counts["with_negative"] += 1
        picked.append(usable[0] if neg_pick == "first" else usable[int(rng.integers(len(usable)))])
    counts["tsv_keys_unused"] = len(negatives) - len(used_keys)
    return picked, dict(counts)


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _image_id(identity: str, index: int) -> int:
    """COCO cocoid / Flickr file stem as an int identity; the image index when the id is not numeric."""
    return int(identity) if identity.isdigit() else index


def build_split_cache(directory: str, dataset, clip, *, negatives=None, neg_pick: str = "first", seed: int = 0,
                      batch_size: int = 64, max_tokens: int = DEFAULTS.max_tokens, dtype=np.float16,
                      num_workers: int | None = None, overwrite: bool = False, extra_meta: dict | None = None,
                      log: Callable[[str], None] = print, progress_every_s: float = 10.0) -> dict[str, Any]:
    """Encode one `RetrievalDataset` (image paths + captions) into `directory`; returns the cache's meta dict.

    `clip` = (model, params, tokenizer) from `load_hf_clip`; `negatives` from `read_negclip_negatives` or None.
    """
    model, params, tokenizer = clip
    image_size = model.config.vision_config.image_size
    captions = list(dataset.captions)
    owner = [int(i) for i in dataset.caption_to_image]
    picked, counts = attach_negatives(dataset.images, captions, owner, negatives, neg_pick=neg_pick, seed=seed)

    texts = list(captions)
    neg_index: dict[str, int] = {}
    records = []
    for j, (caption, image, negative) in enumerate(zip(captions, owner, picked)):
        record = {"image": image, "pos": j, "image_id": _image_id(dataset.image_ids[image], image),
                  "pos_text": caption}
        if negative is not None:
            if negative not in neg_index:  # identical negative strings share one text row
                neg_index[negative] = len(texts)
                texts.append(negative)
            record.update(neg=neg_index[negative], neg_text=negative)
        records.append(record)
    counts["negative_texts"] = len(neg_index)

    encode_image, encode_text = clip_encoders(model, params, tokenizer, batch_size=batch_size)
    t0 = time.monotonic()
    image_progress = progress(dataset.num_images, "[cache] images", unit="image", log=log,
                              mininterval=progress_every_s)
    text_progress = progress(len(texts), "[cache] texts", unit="text", log=log, mininterval=progress_every_s)

    def encode_image_counted(pixels):
        out = encode_image(pixels)
        image_progress.update(len(pixels))
        return out

    def encode_text_counted(strings):
        out = encode_text(strings)
        text_progress.update(len(strings))
        return out

    images = ClipImageSequence(dataset.images, image_size, block_size=batch_size, num_workers=num_workers)
    log(f"[cache] {directory}: {dataset.num_images} images, {len(captions)} captions, {len(texts)} texts, "
        f"{len(records)} records ({counts.get('with_negative', 0)} with a negative), image_size {image_size}")
    meta_extra = {
        "encoder": type(model).__name__, "model_config": dataclasses.asdict(model.config), "source": dataset.name,
        "split": dataset.split, "data_sources": list(dataset.sources), "skipped": dict(dataset.skipped),
        "negatives": counts, "neg_pick": neg_pick, "neg_seed": seed,
        "preprocessing": {"image_size": image_size, "resize": "shortest_side_bicubic", "crop": "center",
                          "mean": list(CLIP_MEAN), "std": list(CLIP_STD)},
        **(extra_meta or {}),
    }
    try:
        meta = write_feature_cache(directory, images, texts, encode_image=encode_image_counted,
                                   encode_text=encode_text_counted, records=records, batch_size=batch_size,
                                   max_tokens=max_tokens, dtype=dtype, overwrite=overwrite, extra_meta=meta_extra)
    finally:
        images.close()
        image_progress.close()
        text_progress.close()
    log(f"[cache] {directory}: done in {_duration(time.monotonic() - t0)}; truncated "
        f"{meta['truncated_texts']} texts past {meta['text_length']} tokens")
    return meta


def build_coco_caches(clip_dir: str | os.PathLike, karpathy_json: str | os.PathLike, image_root: str | os.PathLike,
                      out: str | os.PathLike, *, negclip_tsv: str | os.PathLike | None = None,
                      splits: Sequence[str] = ("train", "val"), neg_pick: str = "first", seed: int = 0,
                      captions_per_image: int = 5, batch_size: int = 64, max_tokens: int = DEFAULTS.max_tokens,
                      dtype=np.float16, num_workers: int | None = None, missing_images: str = "error", overwrite: bool = False,
                      log: Callable[[str], None] = print, progress_every_s: float = 10.0) -> dict[str, dict]:
    """Write ``out/<split>`` for every Karpathy split in `splits` (negatives only for 'train'); returns
    {split: meta}. See the module docstring for records, matching and counts."""
    if neg_pick not in NEG_PICKS:
        raise ValueError(f"neg_pick must be one of {NEG_PICKS}, got {neg_pick!r}")
    if "train" not in splits and negclip_tsv is not None:
        raise ValueError("negclip_tsv is given but 'train' is not among the splits to build")
    for split in splits:
        target = os.path.join(os.fspath(out), split)
        if os.path.exists(target) and os.listdir(target) and not overwrite:  # fail before any encoding
            raise FileExistsError(f"{target} is not empty (pass overwrite=True / --overwrite to replace it)")
    clip = load_hf_clip(clip_dir)
    negatives, tsv_counts = None, {}
    if negclip_tsv is not None:
        negatives, tsv_counts = read_negclip_negatives(negclip_tsv)
        log(f"[cache] NegCLIP TSV {negclip_tsv}: {tsv_counts['tsv_rows']} rows, {len(negatives)} distinct "
            f"(image, caption) keys, {tsv_counts['tsv_duplicate_keys']} repeated keys (first row kept), "
            f"{tsv_counts['tsv_rows_without_negative']} rows with no negative")
    metas = {}
    for split in splits:
        dataset = karpathy(karpathy_json, image_root, split=split, captions_per_image=captions_per_image,
                           missing_images=missing_images)
        with_negatives = split == "train" and negatives is not None
        extra = {"clip_dir": os.path.abspath(clip_dir), "karpathy_json": os.path.abspath(karpathy_json),
                 "negclip_tsv": os.path.abspath(negclip_tsv) if with_negatives else None}
        if with_negatives:
            extra["negclip_tsv_counts"] = tsv_counts
        meta = build_split_cache(os.path.join(os.fspath(out), split), dataset, clip,
                                 negatives=negatives if with_negatives else None, neg_pick=neg_pick, seed=seed,
                                 batch_size=batch_size, max_tokens=max_tokens, dtype=dtype, num_workers=num_workers,
                                 overwrite=overwrite, extra_meta=extra, log=log, progress_every_s=progress_every_s)
        if with_negatives:
            c = meta["negatives"]
            log(f"[cache] train negatives: {c.get('with_negative', 0)} of {c['captions']} captions matched; "
                f"{c.get('without_negative_unmatched', 0)} captions have no TSV row, "
                f"{c.get('without_negative_empty_or_identical', 0)} have a row without a usable negative, "
                f"{c.get('tsv_keys_unused', 0)} TSV keys match no Karpathy train caption")
        metas[split] = meta
    return metas


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clip_dir", required=True, help="Hugging Face CLIP directory (config.json, "
                        "model.safetensors, tokenizer files)")
    parser.add_argument("--karpathy_json", required=True, help="dataset_coco.json (Karpathy splits)")
    parser.add_argument("--image_root", required=True, help="directory holding train2014/ and val2014/")
    parser.add_argument("--out", required=True, help="cache root; writes <out>/<split> per split")
    parser.add_argument("--negclip_tsv", default=None, help="NegCLIP train_neg_clip.tsv (hard negatives)")
    parser.add_argument("--splits", default="train,val", help="comma-separated Karpathy splits (default train,val)")
    parser.add_argument("--neg_pick", default="first", choices=NEG_PICKS)
    parser.add_argument("--seed", type=int, default=0, help="seed for --neg_pick random")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_tokens", type=int, default=DEFAULTS.max_tokens)
    parser.add_argument("--dtype", default="float16", choices=("float16", "float32"))
    parser.add_argument("--num_workers", type=int, default=None, help="image decoding threads (default ≤ 8)")
    parser.add_argument("--missing_images", default="error", choices=("error", "skip"),
                        help="'skip' drops images missing on disk and counts them in meta.json")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    splits = [s for s in args.splits.split(",") if s]
    build_coco_caches(args.clip_dir, args.karpathy_json, args.image_root, args.out, negclip_tsv=args.negclip_tsv,
                      splits=splits, neg_pick=args.neg_pick, seed=args.seed, batch_size=args.batch_size,
                      max_tokens=args.max_tokens, dtype=np.dtype(args.dtype), num_workers=args.num_workers,
                      missing_images=args.missing_images, overwrite=args.overwrite,
                      log=lambda msg: print(msg, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
