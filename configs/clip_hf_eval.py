"""Evaluate a pretrained Hugging Face CLIP — alone (cosine) or with a trained Flow-CLIP / Global-M head — on
compositional benchmarks read from their official files and on zero-shot classification of an image folder. No
training (`config.pretrained = 'hf_clip'`, no task): `evaluate.py` writes results.json / results.md into the (new)
workdir (`mmjax/evaluation/hf_clip.py`).

The config argument names the benchmarks to run (comma-separated, from `BENCHMARKS` below); each gets a
`config.benchmarks.<name>` entry {reader, path, image_root, kwargs} whose path and image_root you set by flag:

    python evaluate.py --config configs/clip_hf_eval.py:sugarcrepe,aro_vgr,aro_vga --workdir out/clip_b32 \
        --config.data.clip_dir=/models/clip-vit-base-patch32 \
        --config.benchmarks.sugarcrepe.path=/data/sugar-crepe/data \
        --config.benchmarks.sugarcrepe.image_root=/data/coco/val2017 \
        --config.benchmarks.aro_vgr.path=/data/aro/visual_genome_relation.json \
        --config.benchmarks.aro_vgr.image_root=/data/aro/images \
        --config.benchmarks.aro_vga.path=/data/aro/visual_genome_attribution.json \
        --config.benchmarks.aro_vga.image_root=/data/aro/images

Add `--config.data.head_workdir=workdir/fc_coco_b32_cimr` to score with a finished `configs/flowclip_coco.py` head
(trained on features of the same CLIP) instead of plain cosine, and
`--config.evals.zeroshot.folder=/data/imagenet_val` for zero-shot top-1/top-5 over `folder/<class name>/*.jpg`
(class names from the folder names, "_" read as a space). Unset inputs are skipped: no benchmark -> no
compositional results, empty folder -> no zero-shot.

Files per benchmark (path / image_root; `kwargs` are passed to the reader, e.g.
`--config.benchmarks.aro_vgr.kwargs.missing_images=skip`):

    aro_vgr, aro_vga      visual_genome_{relation,attribution}.json / the unzipped ARO `images` directory (bbox crops)
    aro_coco_order        coco_karpathy_test.json (BLIP) / COCO root it is relative to (needs spaCy + nltk)
    aro_flickr_order      flickr30k_test.json (BLIP) / Flickr30k image root (needs spaCy + nltk)
    sugarcrepe            the sugar-crepe `data` directory (7 subset JSONs) / COCO `val2017`
    whatsup_coco          a tuple of files: "('/d/coco_qa_one_obj.json','/d/coco_qa_two_obj.json')" / What's Up root
    whatsup_gqa           "('/d/vg_qa_one_obj.json','/d/vg_qa_two_obj.json')" / What's Up root
    winoground            examples.jsonl / the Winoground `images` directory
    clevr                 output_2obj.csv / images_2obj
    pug                   PUG_SPARE.csv / the PUG:SPARE directory
    abc6k                 ABC-6K.txt / COCO root holding train2014/ and val2014/; also set kwargs.coco_captions:
                          "('/coco/annotations/captions_train2014.json','/coco/annotations/captions_val2014.json')"
"""

import ml_collections

# name -> (reader in mmjax.data.readers, default path (a tuple for readers taking several files), reader kwargs)
BENCHMARKS = {
    "aro_vgr": ("aro", "", {"task": "vg_relation"}),
    "aro_vga": ("aro", "", {"task": "vg_attribution"}),
    "aro_coco_order": ("aro", "", {"task": "coco_order"}),
    "aro_flickr_order": ("aro", "", {"task": "flickr30k_order"}),
    "sugarcrepe": ("sugarcrepe", "", {}),
    "whatsup_coco": ("whatsup", ("", ""), {}),
    "whatsup_gqa": ("whatsup", ("", ""), {}),
    "winoground": ("winoground", "", {}),
    "clevr": ("clevr_pug", "", {"dataset": "clevr"}),
    "pug": ("clevr_pug", "", {"dataset": "pug"}),
    "abc6k": ("abc6k", "", {"coco_captions": ("", "")}),
}


def get_config(arg: str = ""):
    names = [n for n in (arg or "").split(",") if n]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown} in the config argument; known: {sorted(BENCHMARKS)}")
    c = ml_collections.ConfigDict()
    c.pretrained = "hf_clip"  # what is evaluated: no `task`, nothing to train (train.py refuses this config)
    c.seed = 0
    c.data = dict(clip_dir="", head_workdir="", batch_size=64, num_workers=4)
    c.benchmarks = {name: {"reader": BENCHMARKS[name][0], "path": BENCHMARKS[name][1], "image_root": "",
                           "kwargs": {**BENCHMARKS[name][2], "missing_images": "error"}}
                    for name in names}
    # keep_scores: per-record scores in results.json (recomputing metrics, checking a scorer).
    c.evals = {"compositional": {"type": "compositional", "keep_scores": False},
               "zeroshot": {"type": "zeroshot", "folder": ""}}
    return c
