"""Set Div baseline on ShapesWorld regions: smooth-Chamfer similarity (α = 16) + Div (uniformity on residuals) + MMD,
no GD/ISD/contrastive terms (`kdwonn/DivE` recipe, docs/design.md#baseline-configs).

    python train.py --config configs/setdiv_shapes.py --workdir workdir/setdiv_shapes
    python train.py --config configs/setdiv_shapes.py:smoke --workdir /tmp/setdiv_smoke
"""

from mmjax.train.defaults import retrieval_config


def get_config(arg: str = ""):
    c = retrieval_config(arg)
    c.loss.update(similarity="smooth_chamfer", alpha=16.0, lambda_con=0.0, lambda_gd=0.0, lambda_isd=0.0,
                  lambda_div=0.01, div_type="uniformity", lambda_mmd=0.01)
    return c
