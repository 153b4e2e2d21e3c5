"""`scripts/cache_clip_features.py` end to end on tiny files: Karpathy JSON + PNG/JPEG images + NegCLIP TSV + a
tiny HF-format CLIP (numpy-written safetensors, no torch) → train/val caches → 2 head-training steps with
`configs/flowclip_coco.py`.

The tiny CLIP (tests/models/conftest.py) has image_size 16, patch 4 (16 patches), projection 20 and a 16-token
context, so the preprocessing must follow the checkpoint's vision_config and text_length is 16 (< max_tokens 32).
"""

import json
import re
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mmjax.data.clip_preprocess import preprocess_batch
from mmjax.models.feature_cache import FeatureCache

from tests.module_loader import load as _load


script = _load("scripts/cache_clip_features.py", "cache_clip_features")
hf_fixtures = _load("tests/models/conftest.py", "hf_fixtures")
hf_loader_tests = _load("tests/models/test_hf_loaders.py", "hf_loader_tests")

# Karpathy COCO entries: (split, cocoid, image (h, w), suffix); captions use only letters the tiny BPE knows.
IMAGES = [("train", 11, (20, 28), ".jpg"), ("restval", 12, (24, 18), ".png"), ("train", 13, (16, 16), ".png"),
          ("val", 21, (18, 30), ".jpg"), ("val", 22, (30, 22), ".png"), ("test", 31, (16, 20), ".jpg")]


def _captions(cocoid):
    return [f"a cat {chr(97 + j)} {chr(97 + cocoid % 26)}" for j in range(5)] + ["an extra sixth"]


def _file_name(split, cocoid, suffix):
    folder = "train2014" if split in ("train", "restval") else "val2014"
    return folder, f"COCO_{folder}_{cocoid:012d}{suffix}"


def write_coco(root: Path):
    rng = np.random.default_rng(0)
    images = []
    for k, (split, cocoid, hw, suffix) in enumerate(IMAGES):
        folder, name = _file_name(split, cocoid, suffix)
        (root / "coco" / folder).mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (*hw, 3), dtype=np.uint8)).save(root / "coco" / folder / name)
        images.append({"filepath": folder, "filename": name, "imgid": k, "split": split, "cocoid": cocoid,
                       "sentences": [{"raw": c, "tokens": c.split()} for c in _captions(cocoid)]})
    karpathy_json = root / "dataset_coco.json"
    karpathy_json.write_text(json.dumps({"dataset": "coco", "images": images}))
    return karpathy_json, root / "coco"


def write_negclip_tsv(path: Path):
    train11 = "/abs/coco/train2014/" + _file_name("train", 11, ".jpg")[1]
    restval12 = "train2014/" + _file_name("restval", 12, ".png")[1]
    val21 = "val2014/" + _file_name("val", 21, ".jpg")[1]
    rows = [
        # case and punctuation differ from the Karpathy text: matched after pre_caption normalisation
        ("A cat a l.", train11, "['dog a cat l', 'a dog a l']"),
        ("a cat a l", train11, "['a repeated key']"),                  # same key again: counted, first row wins
        ("a cat b l", train11, "['A CAT B L!', 'b cat a l']"),          # first negative equals the positive
        ("a cat c l", train11, "[]"),                                    # matched row without a negative
        ("a cat a m", restval12, "['dog a cat l']"),                    # same negative text as row 1: shared row
        ("a cat a v", val21, "['a dog a v']"),                           # val image: key unused by train
    ]
    lines = ["\ttitle\tfilepath\tneg_caption\tneg_image"]
    lines += [f"{k}\t{t}\t{fp}\t{neg}\t[]" for k, (t, fp, neg) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


write_tiny_clip = hf_loader_tests.write_tiny_clip


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    karpathy_json, image_root = write_coco(root)
    tsv = write_negclip_tsv(root / "train_neg_clip.tsv")
    clip_dir = write_tiny_clip(root / "clip")
    logs = []
    metas = script.build_coco_caches(clip_dir, karpathy_json, image_root, root / "cache", negclip_tsv=tsv,
                                     batch_size=2, num_workers=2, log=logs.append, progress_every_s=0.0)
    return {"root": root, "out": root / "cache", "metas": metas, "logs": logs, "clip_dir": clip_dir,
            "karpathy_json": karpathy_json, "image_root": image_root, "tsv": tsv}


def test_train_cache_records_and_negatives(caches):
    cache = FeatureCache(caches["out"] / "train")
    meta = cache.meta
    assert meta["dtype"] == "float16" and meta["max_tokens"] == 32 and meta["text_length"] == 16
    assert cache.num_images == 3  # train + restval
    assert cache.arrays["img_global"].shape == (3, 20) and cache.arrays["img_patches"].shape == (3, 16, 20)
    assert cache.arrays["img_patches"].dtype == np.float16
    assert meta["preprocessing"]["image_size"] == 16

    records = cache.records()
    assert len(records) == 15  # 3 images × first 5 captions (the sixth is counted in skipped)
    assert meta["skipped"] == {"captions_beyond_limit": 3}
    assert [r["image_id"] for r in records] == [11] * 5 + [12] * 5 + [13] * 5
    assert [r["image"] for r in records] == [0] * 5 + [1] * 5 + [2] * 5
    assert [r["pos"] for r in records] == list(range(15))
    by_text = {(r["image_id"], r["pos_text"]): r for r in records}
    assert by_text[(11, "a cat a l")]["neg_text"] == "dog a cat l"     # normalised match, first row of the key
    assert by_text[(11, "a cat b l")]["neg_text"] == "b cat a l"       # the identical negative was passed over
    assert "neg" not in by_text[(11, "a cat c l")]                      # row with an empty list
    assert by_text[(12, "a cat a m")]["neg"] == by_text[(11, "a cat a l")]["neg"]  # shared negative text row
    assert sum("neg" in r for r in records) == 3

    counts = meta["negatives"]
    assert counts == {"captions": 15, "with_negative": 3, "without_negative_unmatched": 11,
                      "without_negative_empty_or_identical": 1, "negatives_equal_to_positive": 1,
                      "tsv_keys_unused": 1, "negative_texts": 2}
    assert meta["negclip_tsv_counts"] == {"tsv_rows": 6, "tsv_duplicate_keys": 1, "tsv_rows_without_negative": 1}
    assert cache.num_texts == 15 + 2
    texts = [r["pos_text"] for r in records]
    assert texts == [c for cid in (11, 12, 13) for c in _captions(cid)[:5]]
    assert any("3 of 15 captions matched" in line for line in caches["logs"])
    # tqdm progress: count, then [elapsed<remaining (the ETA), rate]
    assert any(re.search(r"images: .*3/3 \[\d+:\d+<\d+:\d+", line) for line in caches["logs"]), caches["logs"]


def test_val_cache_and_image_features(caches):
    cache = FeatureCache(caches["out"] / "val")
    records = cache.records()
    assert cache.num_images == 2 and cache.num_texts == 10 and len(records) == 10
    assert all("neg" not in r for r in records)
    assert [r["image"] for r in records] == [0] * 5 + [1] * 5
    assert cache.meta["negatives"] == {"captions": 10, "without_negative_no_tsv": 10, "negative_texts": 0}
    assert cache.meta["negclip_tsv"] is None

    # The cached image features are the CLIP encodings of the preprocessed files, in Karpathy order.
    from mmjax.models.hf import load_hf_clip

    model, params, _ = load_hf_clip(caches["clip_dir"])
    paths = [str(caches["image_root"] / "val2014" / _file_name("val", cid, sfx)[1])
             for split, cid, _, sfx in IMAGES if split == "val"]
    out = model.apply({"params": params}, preprocess_batch(paths, 16), method="encode_image")
    np.testing.assert_allclose(cache.images([0, 1])["global"], np.asarray(out["global"]), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(cache.images([0, 1])["patches"], np.asarray(out["patches"]), rtol=2e-3, atol=2e-3)


def test_existing_cache_is_not_overwritten(caches):
    with pytest.raises(FileExistsError, match="train is not empty"):
        script.build_coco_caches(caches["clip_dir"], caches["karpathy_json"], caches["image_root"], caches["out"],
                                 log=lambda _: None)


def test_attach_negatives_random_pick_is_seeded():
    negatives = {("x.jpg", "a b"): ("c d", "e f", "g h")}
    picks = {script.attach_negatives(["/r/x.jpg"], ["A b."], [0], negatives, neg_pick="random", seed=s)[0][0]
             for s in range(20)}
    assert picks <= {"c d", "e f", "g h"} and len(picks) > 1
    with pytest.raises(ValueError, match="neg_pick"):
        script.attach_negatives(["x.jpg"], ["a"], [0], negatives, neg_pick="last")


def test_cli_main_builds_val_only(caches, tmp_path, capsys):
    out = tmp_path / "cli_cache"
    assert script.main(["--clip_dir", str(caches["clip_dir"]), "--karpathy_json", str(caches["karpathy_json"]),
                        "--image_root", str(caches["image_root"]), "--out", str(out), "--splits", "test",
                        "--batch_size", "4", "--dtype", "float32"]) == 0
    cache = FeatureCache(out / "test")
    assert cache.num_images == 1 and cache.meta["dtype"] == "float32"
    assert "[cache]" in capsys.readouterr().out


def test_config_variants():
    config_module = _load("configs/flowclip_coco.py", "flowclip_coco_config")
    c = config_module.get_config("")
    assert c.data.name == "coco" and c.data.batch_size == 1024 and c.flowclip.use_local and c.data.cache_dir == ""
    g = config_module.get_config("globalm_hnb")
    assert not g.flowclip.use_local and g.flowclip.lambda_cimr == 0.0
    assert config_module.get_config("flowclip_hnb,smoke").data.batch_size == 32
    with pytest.raises(ValueError, match="unknown variant"):
        config_module.get_config("flowclip,smoke")


def test_train_head_two_steps_on_the_cache(caches, tmp_path):
    from mmjax.experiment import run as train_and_evaluate

    config = _load("configs/flowclip_coco.py", "flowclip_coco_config").get_config("flowclip_cimr,smoke")
    config.data.cache_dir = str(caches["out"])
    config.data.batch_size = 4
    config.train.update(num_steps=2, log_every=1, eval_every=2, checkpoint_every=2, async_checkpoints=False)
    config.eval_caption_chunk = 4
    workdir = tmp_path / "head"
    result = train_and_evaluate(config, str(workdir))
    lines = [json.loads(line) for line in open(workdir / "metrics.jsonl") if line.strip()]
    assert lines and max(line.get("step", 0) for line in lines) == 2
    assert any(k.startswith("loss/") for line in lines for k in line)
    assert result["final_val"] and all(np.isfinite(v) for v in result["final_val"].values())
    assert os.path.isdir(workdir)
