"""VSE∞-style single-vector baseline on ShapesWorld regions: one embedding per image (GPO pooling) and per caption,
cosine similarity, hardest-negative triplet after one VSE0 epoch (`woodfrog/vse_infty`;
docs/design.md#baseline-configs).

    python train.py --config configs/vse_shapes.py --workdir workdir/vse_shapes
    python train.py --config configs/vse_shapes.py:smoke --workdir /tmp/vse_smoke
"""

from mmjax.train.defaults import retrieval_config, retrieval_evals


def get_config(arg: str = ""):
    c = retrieval_config(arg)
    c.model.set_head = "none"
    c.model.image.pool = "gpo"
    # With K = 1 every set similarity is the cosine of the two vectors; 'average' computes exactly that.
    c.loss.update(similarity="average", lambda_con=0.0, lambda_gd=0.0, lambda_isd=0.0, lambda_div=0.0,
                  lambda_mmd=0.0)
    c.optim.lr_mults = ()
    c.evals = retrieval_evals(set_analysis=False)
    return c
