"""Reference exact solver: optax's Hungarian algorithm (Crouse's shortest augmenting path).

optax minimises cost and returns (rows, cols); we call it with cost = −A to maximise and scatter into perm[rows] = cols.
It is jit- and vmap-compatible; under vmap its while-loops run until the slowest problem of the batch finishes.
Inputs must be finite: optax returns wrong matchings with ±inf entries, which is why padding uses a large finite
penalty (`mmjax.matching.padding`).
"""

import jax.numpy as jnp
import optax


def solve_hungarian(benefit: jnp.ndarray) -> jnp.ndarray:
    """Maximising assignment of one square block `benefit[K, K]` -> perm int32[K]."""
    k = benefit.shape[-1]
    rows, cols = optax.assignment.hungarian_algorithm(-benefit.astype(jnp.float32))
    return jnp.zeros((k,), jnp.int32).at[rows].set(cols.astype(jnp.int32))
