"""PVSE baseline on ShapesWorld regions: PIE set heads, MIL (max) similarity, Gram diversity (weight 0.1), MMD,
margin 0.1 (`yalesong/pvse` defaults; docs/design.md#baseline-configs). The MaxMatch plug-in experiment is the same
config with `--config.loss.similarity=maxmatch --config.loss.lambda_gd=0.1 --config.loss.lambda_isd=0.1`.

    python train.py --config configs/pvse_shapes.py --workdir workdir/pvse_shapes
    python train.py --config configs/pvse_shapes.py:smoke --workdir /tmp/pvse_smoke
"""

from mmjax.train.defaults import retrieval_config


def get_config(arg: str = ""):
    c = retrieval_config(arg)
    c.model.set_head = "pie"
    c.loss.update(similarity="mil", margin=0.1, lambda_con=0.0, lambda_gd=0.0, lambda_isd=0.0, lambda_div=0.1,
                  div_type="gram", lambda_mmd=0.01)
    return c
