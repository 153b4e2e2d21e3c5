"""Exact assignment by enumerating all K! permutations.

    π* = argmax_{π ∈ S_K} Σ_k A[k, π(k)]

The K! permutations are a static one-hot table Pm ∈ {0,1}^{K!×K²} built with numpy at trace time, so the totals of
all permutations are one matrix product, `A.reshape(K²) @ Pmᵀ`, and the solver is a matmul plus an argmax. Ties go to
the first maximiser in lexicographic order. Exact by construction; the default for K ≤ 5 (K! = 120) and the test
oracle for K ≤ 8 (K! = 40 320).
"""

import functools
import itertools

import jax.numpy as jnp
import numpy as np

MAX_K = 8


@functools.lru_cache(maxsize=None)
def permutation_table(k: int) -> tuple[np.ndarray, np.ndarray]:
    """(perms int32[K!, K], one-hot float32[K!, K*K]) in lexicographic order."""
    if not 1 <= k <= MAX_K:
        raise ValueError(f"enumerate solver supports 1 <= K <= {MAX_K}, got K={k}")
    perms = np.array(list(itertools.permutations(range(k))), dtype=np.int32)
    onehot = np.zeros((len(perms), k * k), np.float32)
    rows = np.arange(k)
    for p, perm in enumerate(perms):
        onehot[p, rows * k + perm] = 1.0
    return perms, onehot


def solve_enumerate(benefit: jnp.ndarray) -> jnp.ndarray:
    """Maximising assignment of one square block `benefit[K, K]` -> perm int32[K]."""
    k = benefit.shape[-1]
    perms, onehot = permutation_table(k)
    totals = jnp.dot(benefit.reshape(k * k).astype(jnp.float32), jnp.asarray(onehot).T,
                     precision="highest")
    return jnp.asarray(perms)[jnp.argmax(totals)]
