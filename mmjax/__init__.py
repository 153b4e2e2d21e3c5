"""mmjax: MaxMatch and Flow-CLIP image–text matching in JAX/Flax.

Subpackages (dependencies point one way; `matching` depends on jax.numpy alone):

- `mmjax.matching`   — linear assignment on K×K blocks (enumerate, auction, hungarian, sinkhorn, auto).
- `mmjax.similarity` — set-to-set similarities over batches (MIL, average, Chamfer, smooth-Chamfer, MaxMatch).
- `mmjax.losses`     — triplet / VSE0, InfoNCE, Div, MMD, GD, ISD and the MaxMatch objective.
- `mmjax.flowclip`   — Global-M and ICER scoring, HNB and CIMR.
- `mmjax.models`     — Flax modules (set prediction, towers, BERT, CLIP) and HF weight loaders.
- `mmjax.data`       — ShapesWorld, tokenizers, dataset readers, input pipeline.
"""

__version__ = "0.1.0"
