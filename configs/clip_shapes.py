"""A small CLIP-style dual encoder pretrained contrastively on ShapesWorld pixels, then frozen as the base model of
the ShapesWorld Flow-CLIP heads (docs/design.md#shapesworld-presets `base_clip`).

    python train.py --config configs/clip_shapes.py --workdir workdir/clip_shapes
    python train.py --config configs/clip_shapes.py:smoke --workdir /tmp/clip_smoke     # tests (seconds)

Its final step exports the parameters to `<workdir>/export/`, which `configs/flowclip_shapes.py` reads
(`--config.data.clip_workdir`).
"""

from mmjax.train.defaults import clip_pretrain_config


def get_config(arg: str = ""):
    return clip_pretrain_config(arg)
