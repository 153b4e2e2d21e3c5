"""Optimality certificates for a complete assignment, batch-last (`a[K(i), K(j), N]`, `owner[K(j), N]`).

With π the assignment (row owner_j holds column j) and any column prices d, weak duality gives

    gap(d) = Σ_i [ max_j (A_ij − d_j) − (A_iπ(i) − d_π(i)) ] = D(d) − P ≥ OPT − P ≥ 0,

a sum of small non-negative terms (accurate in float32).

- 'duality': d = the auction's prices (ε-complementary slackness bounds gap by K·ε).
- 'bellman_ford' (exact): π is optimal iff its exchange graph has no positive cycle. In column space — row owner_j
  leaves column j for column j′ — the edge weight is C[j, j′] = B[j, j′] − B[j, j] with B[j, j′] = A[owner_j, j′]
  (A with its rows reordered by the assignment). Longest-path potentials are exact dual prices; starting from
  d⁰ = the auction's prices, max-plus relaxations

      d_j′ ← max(d_j′, max_j (C[j, j′] + d_j))          (2 element-ops per entry: add, max)

  reach the fixed point within K − 1 steps whenever π is optimal (longest walks are simple paths), and then
  gap(d) = 0 up to rounding; if π is suboptimal no d certifies it (gap(d) ≥ OPT − P > 0). Each problem stops
  relaxing as soon as its potentials stop moving; `compacting_while` keeps the slow ones in shrinking buffers.
"""

import jax
import jax.numpy as jnp

from mmjax.matching.compaction import compacting_while

CERTIFICATES = ("duality", "bellman_ford")


def _max0(x):
    out = x[0]
    for r in range(1, x.shape[0]):
        out = jnp.maximum(out, x[r])
    return out


def assigned_rows_matrix(a, owner):
    """B[j, j′, n] = a[owner[j, n], j′, n]: rows reordered so row j holds column j (one gather, once)."""
    k, n = owner.shape
    return jnp.take_along_axis(a, jnp.broadcast_to(owner[:, None, :], (k, k, n)), axis=0)


def _relax(c, d):
    """One max-plus relaxation d_j′ ← max(d_j′, max_j C[j, j′] + d_j) on C[K(j), K(j′), N], d[K, N]."""
    best = c[0] + d[0][None, :]
    for j in range(1, c.shape[0]):
        best = jnp.maximum(best, c[j] + d[j][None, :])
    return jnp.maximum(d, best)


def _bf_round(c, state):
    d, done, t = state
    new = _relax(c, d)
    grew = new > d
    moved = grew[0]
    for j in range(1, grew.shape[0]):        # unrolled: XLA:CPU reduces over a major axis slowly (auction.py)
        moved = moved | grew[j]
    t = t + (~done).astype(jnp.int32)
    d = jnp.where(done[None, :], d, new)
    return d, done | ~moved | (t >= c.shape[0] - 1), t


def certify(a, owner, prices, certificate: str, capacities=()):
    """(gap f32[N], perm int32[K(i), N], relaxation trips int32[S + 1]) for a complete assignment."""
    if certificate not in CERTIFICATES:
        raise ValueError(f"auction certificate must be one of {CERTIFICATES}, got {certificate!r}")
    k, n = owner.shape
    b = assigned_rows_matrix(a, jnp.maximum(owner, 0))      # incomplete assignments are flagged by the caller
    own = jnp.stack([b[j, j] for j in range(k)])                          # A[owner_j, j]: [K(j), N]
    d = prices
    trips = jnp.zeros((1,), jnp.int32)
    if certificate == "bellman_ford" and k > 1:
        c = b - own[:, None, :]
        state = (prices, jnp.zeros((n,), bool), jnp.zeros((n,), jnp.int32))
        (d, _, _), trips = compacting_while(_bf_round, lambda s: s[1], c, state, capacities)
    # slack of row owner_j: max_j′ (B[j, j′] − d_j′) − (A[owner_j, j] − d_j) ≥ 0.
    slack = _max0(jnp.moveaxis(b, 1, 0) - d[:, None, :]) - (own - d)
    gap = jnp.sum(slack, axis=0)
    rowid = jax.lax.broadcasted_iota(jnp.int32, (k, n), 0)
    perm = sum(jnp.where(owner[j][None, :] == rowid, j, 0) for j in range(k)).astype(jnp.int32)
    return gap, perm, trips


def certificate_gap(benefit, perm, prices, certificate: str = "bellman_ford"):
    """Certified bound on OPT − Σ_i A[i, perm[i]] for given permutations and starting prices (both [..., K]).

    'duality' evaluates gap(prices); 'bellman_ford' first relaxes the prices to exact longest-path potentials of the
    exchange graph, so the bound is 0 (up to rounding) iff perm is optimal. Exposed for tests and diagnostics.
    """
    benefit = jnp.asarray(benefit, jnp.float32)
    batch, k = benefit.shape[:-2], benefit.shape[-1]
    a = jnp.moveaxis(benefit.reshape((-1, k, k)), 0, -1)
    perm = jnp.asarray(perm, jnp.int32).reshape((-1, k)).T                  # [K(i), N]
    # owner[j] = the row i with perm[i] = j.
    owner = sum(jnp.where(perm[i][None, :] == jnp.arange(k)[:, None], i, 0) for i in range(k)).astype(jnp.int32)
    prices = jnp.broadcast_to(jnp.asarray(prices, jnp.float32), batch + (k,)).reshape((-1, k)).T
    return certify(a, owner, prices, certificate)[0].reshape(batch)
