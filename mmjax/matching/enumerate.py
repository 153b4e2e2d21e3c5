"""Exact assignment by enumerating all K! permutations.

    π* = argmax_{π ∈ S_K} Σ_k A[k, π(k)]

The K! permutations are a static one-hot table Pm ∈ {0,1}^{K!×K²} built with numpy at trace time, so the totals of
all permutations are one matrix product, `A.reshape(K²) @ Pmᵀ`, and the solver is a matmul plus an argmax. Ties go to
the first maximiser in lexicographic order. Exact by construction; the default for K ≤ 5 (K! = 120) and the test
oracle for K ≤ 8 (K! = 40 320).

`solve_enumerate_unmasked` is the same product over a whole batch of unmasked square blocks, laid out as one
[N, K²] × [K², K!] GEMM whose row maximum is also the matched total: it skips the mask, padding and finite-replacement
passes of the general path (`mmjax.matching.solve_with_aux`), which cost more than the GEMM itself at K = 4
(docs/benchmarks.md#assignment-solvers-python-benchmatchingpy).
"""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.matching.scaling import pow2_factors

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


def solve_enumerate_unmasked(scores: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Batched exact assignment of unmasked square blocks `scores[..., K, K]`.

    Returns (cols int32[..., K], total float32[...], nonfinite bool[...]): a block with a NaN/inf cell gets cols −1 and
    total NaN, as in the general path. Its totals are computed on the raw values (the non-finite ones are discarded
    after the argmax), so no replaced copy of the scores is materialised. A block with max |score| > 2⁶⁴ is summed
    after an exact power-of-two rescaling (`mmjax.matching.scaling`), so the K-term totals cannot overflow float32
    (|C| > 3.4e38/K used to make several totals inf and the argmax pick the first of them); every other block is
    multiplied by 1.0 exactly (bit-for-bit the previous arithmetic).
    """
    k = scores.shape[-1]
    if scores.shape[-2] != k:
        raise ValueError(f"solve_enumerate_unmasked needs square blocks, got shape {scores.shape}")
    perms, onehot = permutation_table(k)
    batch = scores.shape[:-2]
    flat = jax.lax.stop_gradient(scores).astype(jnp.float32).reshape((-1, k * k))
    nonfinite = jnp.any(~jnp.isfinite(flat), axis=-1)
    scale, inv_scale = pow2_factors(jnp.max(jnp.abs(flat), axis=-1), small=0.0)     # only huge blocks: f ≠ 1
    totals = jnp.dot(flat * scale[:, None], jnp.asarray(onehot).T, precision="highest")      # [N, K!]
    best = jnp.argmax(totals, axis=-1)
    cols = jnp.where(nonfinite[:, None], -1, jnp.asarray(perms)[best])
    total = jnp.where(nonfinite, jnp.nan, jnp.max(totals, axis=-1) * inv_scale)
    return cols.reshape(batch + (k,)), total.reshape(batch), nonfinite.reshape(batch)
