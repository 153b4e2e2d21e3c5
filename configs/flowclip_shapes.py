"""Flow-CLIP and Global-M heads on the frozen ShapesWorld CLIP (`configs/clip_shapes.py`), the 2 × 2 grid of
docs/design.md#shapesworld-presets `flowclip_heads`: {Global-M, Flow-CLIP} × {HNB, HNB + CIMR}.

    python train.py --config configs/clip_shapes.py --workdir workdir/clip_shapes        # once, the frozen base
    python train.py --config configs/flowclip_shapes.py:flowclip_cimr --workdir workdir/fc_shapes_cimr \
        --config.data.clip_workdir=workdir/clip_shapes
    variants: flowclip_cimr (default), flowclip_hnb, globalm_cimr, globalm_hnb; append ',smoke' for the test size,
    e.g. `configs/flowclip_shapes.py:globalm_hnb,smoke`, or ',cpu' for the 2-core budget (batch 64, 300 steps; HNB and
    CIMR score all B² pairs of a batch, so the default batch 256 costs ~15–25 s per step on 2 cores), e.g.
    `configs/flowclip_shapes.py:flowclip_cimr,cpu`.

Features are encoded once into `<workdir>/feature_cache/{train,val}` (or `--config.data.cache_dir`).
"""

from mmjax.train.defaults import flowclip_head_config


def get_config(arg: str = ""):
    return flowclip_head_config(arg)
