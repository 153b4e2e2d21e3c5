"""MaxMatch on ShapesWorld regions — the main job (`python train.py` with no flags runs this config).

    python train.py --config configs/maxmatch_shapes.py --workdir workdir/maxmatch_shapes
    python train.py --config configs/maxmatch_shapes.py:smoke --workdir /tmp/mm_smoke      # tests (seconds)

S_H similarity (exact assignment, K = 4), triplet (VSE0 warm-up epoch, then hardest negatives) + InfoNCE + GD + ISD +
Div + MMD with the project defaults (`mmjax.losses.maxmatch_loss_config`); Set Div optimiser recipe scaled to
ShapesWorld (`mmjax.train.defaults`).
"""

from mmjax.train.defaults import retrieval_config


def get_config(arg: str = ""):
    c = retrieval_config(arg)
    c.loss.similarity = "maxmatch"
    if arg != "smoke":
        c.train.eval_every = 400
    return c
