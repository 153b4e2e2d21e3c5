"""mmjax: MaxMatch and Flow-CLIP image–text matching in JAX/Flax.

Subpackages (dependencies point one way; `matching` depends on jax.numpy alone):

- `mmjax.matching`   — linear assignment on K×K blocks (enumerate, auction, hungarian, auto) and Sinkhorn soft plans.
- `mmjax.similarity` — set-to-set similarities over batches (MIL, average, Chamfer, smooth-Chamfer, MaxMatch).
- `mmjax.losses`     — triplet / VSE0, InfoNCE, Div, MMD, GD, ISD and the MaxMatch objective.
- `mmjax.flowclip`   — Global-M and ICER scoring, HNB and CIMR.
- `mmjax.models`     — Flax modules (set prediction, towers, BERT, CLIP) and HF weight loaders.
- `mmjax.data`       — ShapesWorld, tokenizers, dataset readers, input pipeline.

`mmjax.load(path, params="final" | "best")` loads a trained run's export as a `mmjax.retriever.Retriever` (embed,
score, retrieve; docs/design.md#loading). It is imported on first use, so `import mmjax` stays cheap.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "load":  # lazy: the retriever pulls in jax, Flax and Orbax
        from mmjax.retriever import load
        return load
    raise AttributeError(f"module 'mmjax' has no attribute {name!r}")
