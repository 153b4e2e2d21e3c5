"""Flow-CLIP and Global-M heads on the frozen ShapesWorld CLIP (`configs/clip_shapes.py`), the 2 × 2 grid of
`shapesworld.md` §9 `flowclip_heads`: {Global-M, Flow-CLIP} × {HNB, HNB + CIMR}.

    python train.py --config configs/clip_shapes.py --workdir workdir/clip_shapes        # once, the frozen base
    python train.py --config configs/flowclip_shapes.py:flowclip_cimr --workdir workdir/fc_shapes_cimr \
        --config.data.clip_workdir=workdir/clip_shapes
    variants: flowclip_cimr (default), flowclip_hnb, globalm_cimr, globalm_hnb; append ',smoke' for the test size,
    e.g. `configs/flowclip_shapes.py:globalm_hnb,smoke`.

Features are encoded once into `<workdir>/feature_cache/{train,val}` (or `--config.data.cache_dir`).
"""

from mmjax.train.defaults import flowclip_head_config

VARIANTS = {"flowclip_cimr": (True, 0.1), "flowclip_hnb": (True, 0.0), "globalm_cimr": (False, 0.1),
            "globalm_hnb": (False, 0.0)}


def get_config(arg: str = ""):
    parts = [p for p in (arg or "flowclip_cimr").split(",") if p]
    head = next((p for p in parts if p in VARIANTS), "flowclip_cimr")
    unknown = [p for p in parts if p not in VARIANTS and p != "smoke"]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {sorted(VARIANTS)} and 'smoke'")
    c = flowclip_head_config("smoke" if "smoke" in parts else "")
    c.flowclip.use_local, c.flowclip.lambda_cimr = VARIANTS[head]
    return c
