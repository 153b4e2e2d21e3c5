"""Flax (linen) modules and Hugging Face weight loaders.

Modules only hold parameters; the math they call lives in `mmjax.similarity`, `mmjax.losses` and `mmjax.flowclip`.
"""
