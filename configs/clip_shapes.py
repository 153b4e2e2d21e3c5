"""A small CLIP-style dual encoder pretrained contrastively on ShapesWorld, then frozen as the base model of the
ShapesWorld Flow-CLIP heads (docs/design.md#shapesworld-presets `base_clip`, `base_clip_regions`).

    python train.py --config configs/clip_shapes.py --workdir workdir/clip_shapes
    python train.py --config configs/clip_shapes.py:cpu --workdir workdir/clip_shapes_cpu  # 2-core budget (minutes)
    python train.py --config configs/clip_shapes.py:regions,cpu --workdir workdir/clip_regions  # region-token base
    python train.py --config configs/clip_shapes.py:regions,token_align,cpu --workdir workdir/clip_aligned  # + words
    python train.py --config configs/clip_shapes.py:smoke --workdir /tmp/clip_smoke     # tests (seconds)

`regions`: the image tower is a transformer over ShapesWorld's region vectors (one local token per region) instead
of a ViT over pixels (one per 8 × 8 patch). `token_align`: the loss adds the late-interaction term that aligns each
word with the image's local tokens (`loss.token_align` = 1, `mmjax.losses.token_alignment`).

The default size needs an accelerator (≈ 15 s per step of 512 on a 2-core CPU, ≈ 3 h for its 20 epochs); `cpu`
(width 128, 2 + 2 layers, batch 256, 4 epochs) is the size the reproduction grid trains.

Its final step exports the parameters to `<workdir>/export/`, which `configs/flowclip_shapes.py` reads
(`--config.data.clip_workdir`).
"""

from mmjax.train.defaults import clip_pretrain_config


def get_config(arg: str = ""):
    return clip_pretrain_config(arg)
