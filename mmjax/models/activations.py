"""Activation functions by their Hugging Face `hidden_act` names.

HF configs name the MLP non-linearity as a string; the names differ in numerics (BERT's "gelu" is the exact erf form,
"gelu_new" / "gelu_pytorch_tanh" the tanh approximation, CLIP's "quick_gelu" is x·σ(1.702x)), so they are mapped
explicitly and an unknown name is an error rather than a silent substitute.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp


def _quick_gelu(x: jax.Array) -> jax.Array:
    return x * jax.nn.sigmoid(1.702 * x)


_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "quick_gelu": _quick_gelu,
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
}


def get_activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """Return the activation function HF calls `name` (raises ValueError for unknown names)."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unsupported hidden_act {name!r}; known: {sorted(_ACTIVATIONS)}") from None
