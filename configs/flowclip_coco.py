"""Flow-CLIP and Global-M heads on a frozen Hugging Face CLIP, trained on COCO Karpathy train with NegCLIP hard
negatives — the LABCLIP recipe of docs/design.md#flowclip-training (Adam 1e-3, batch 1024, no weight decay or schedule,
5 epochs), the 2 × 2 grid {Global-M, Flow-CLIP} × {HNB, HNB + CIMR}.

Two commands: build the feature cache once per CLIP checkpoint, then train any number of heads on it.

    python scripts/cache_clip_features.py --clip_dir /data/clip-vit-base-patch32 \
        --karpathy_json /data/coco/dataset_coco.json --image_root /data/coco \
        --negclip_tsv /data/negclip/train_neg_clip.tsv --out /data/caches/coco_b32
    python train.py --config configs/flowclip_coco.py:flowclip_cimr --workdir workdir/fc_coco_b32_cimr \
        --config.data.cache_dir=/data/caches/coco_b32

`--image_root` is the directory holding `train2014/` and `val2014/`; the cache root receives `train/` (records with
negatives) and `val/` (Karpathy val, 5 000 images × 5 captions, the R@K validation set). `data.cache_dir` is
required: the trainer does not encode COCO itself and stops with an error naming the script when the cache is absent.

Variants: flowclip_cimr (default), flowclip_hnb, globalm_cimr, globalm_hnb; append ',smoke' for the test size
(batch 32, 4 steps), e.g. `configs/flowclip_coco.py:globalm_hnb,smoke`. Batch 1024 is the GPU recipe; on a CPU
pass e.g. `--config.data.batch_size=256`. Seeds: `--config.seed=0|1|2` (the paper reports 3 runs).
"""

from mmjax.train.defaults import flowclip_head_config

def get_config(arg: str = ""):
    smoke = "smoke" in (arg or "").split(",")
    c = flowclip_head_config(arg)
    c.data.name = "coco"
    c.data.cache_dir = ""       # required: root written by scripts/cache_clip_features.py (holds train/ and val/)
    c.data.clip_workdir = ""    # ShapesWorld-only field; empty so config checks do not look for it
    c.data.val_split = "val"    # a cache_clip_features.py split directory (`--splits train,val,test` adds test)
    if not smoke:
        c.data.batch_size = 1024  # LABCLIP recipe (GPU)
    return c
