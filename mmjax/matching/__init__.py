"""Linear assignment on (batches of) small score blocks — `mmjax.matching`.

    π* = argmax_π Σ_i scores[i, π(i)]        (maximisation; rectangular n×m blocks match min(n, m) pairs)

Public API:

- `solve(scores, method="auto", mask=None, **options) -> cols int32[..., n]` — `cols[..., i]` is the column matched to
  row i, or −1 when row i has no valid partner (excess rows of a rectangular block, masked rows, problems with
  non-finite scores). Jittable and vmappable, no host callbacks; scores are treated as constants (stop_gradient);
  gradients flow through the caller's gather of the matched scores, never through a solver.
- `solve_with_aux(...) -> (cols, aux)` with per-batch diagnostics: `total[...]` (sum of matched valid scores),
  `repaired_frac`, `incomplete_frac`, `gap_max` (auction), `nonfinite_frac`.
- `sinkhorn_plan(scores, tau, iters)` — entropic soft plan for ablations (`method="sinkhorn"` in `solve` returns the
  plan [..., n, n] instead of indices; square unmasked blocks only).
- Solvers by name (`SOLVERS`): single-problem functions `A[K, K] -> perm[K]` batched with `vmap`:
  `"enumerate"` (exact, K ≤ 8), `"auction"` (ε-scaling Jacobi auction + certificate; uncertified problems are repaired
  with an exact solver, so the result is exact), `"hungarian"` (optax reference), and `"auto"`, which picks by backend
  and K from `AUTO_TABLE` (CPU row measured by `bench/matching.py`, GPU/TPU rows from its cost model; see
  docs/benchmarks.md).

Masks: `mask` is None, a pair `(row_mask[..., n], col_mask[..., m])`, or a cell mask `[..., n, m]`; masked or padded
elements never match a valid one while a valid partner exists (maximum-cardinality matching), using a large finite
penalty (`mmjax.matching.padding`). Ties: every solver is deterministic; different solvers may return different
optimal permutations, so compare totals.

NaN/inf in valid cells: eager calls raise `ValueError`; under `jit` the problem is reported in
`aux["nonfinite_frac"]` and all its rows come back −1 (never silently matched).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.matching.auction import solve_auction, AuctionResult, num_phases
from mmjax.matching.enumerate import solve_enumerate, solve_enumerate_unmasked, MAX_K as ENUMERATE_MAX_K
from mmjax.matching.hungarian import solve_hungarian
from mmjax.matching.padding import normalise_masks, square_benefit
from mmjax.matching.sinkhorn import sinkhorn_plan

__all__ = ["solve", "solve_with_aux", "sinkhorn_plan", "SOLVERS", "AUTO_TABLE", "choose_auto", "solve_enumerate",
           "solve_hungarian", "solve_auction", "AuctionResult", "num_phases"]

SOLVERS = ("enumerate", "auction", "hungarian", "sinkhorn", "auto")

# (max K, solver) rows, first match wins; per backend.
# "cpu": measured with bench/matching.py (docs/benchmarks.md): enumerate is fastest to K = 5; at K = 8 the Hungarian
# still beats the auction on cosine blocks (auction 0.5–0.7×), from K = 16 the auction wins (cosine and integer ties).
# K = 9..15 were not measured; the switch is placed at the first measured K where the auction wins.
# "gpu"/"tpu": NOT measured (no accelerator was available) — set from the cost model in bench/matching.py (sequential
# while-loop trips on the critical path, which dominate a batched call on an accelerator, and work per problem):
# enumerate is one pass while its K!·K² work is affordable; at K = 8 the auction's critical path is no shorter than
# the Hungarian's (71 vs 65 trips) for ~10× the work; from K = 16 it is 1.3–3.7× shorter (103 vs 212 trips at K = 16,
# 484 vs 607 at 32, 448 vs 1669 at 64).
AUTO_TABLE = {
    "cpu": ((5, "enumerate"), (8, "hungarian"), (None, "auction")),
    "gpu": ((5, "enumerate"), (8, "hungarian"), (None, "auction")),
    "tpu": ((5, "enumerate"), (8, "hungarian"), (None, "auction")),
}


def choose_auto(k: int, backend: str | None = None, table=None) -> str:
    """Solver name `'auto'` resolves to for block size K on `backend` (default: jax.default_backend())."""
    table = AUTO_TABLE if table is None else table
    rows = table.get(backend or jax.default_backend(), table["cpu"])
    for max_k, name in rows:
        if max_k is None or k <= max_k:
            return name
    raise ValueError(f"matching auto_table has no row for K={k}: {rows}")


def _exact_solver(k: int):
    return solve_enumerate if k <= 5 else solve_hungarian


def _check_scores(scores):
    if scores.ndim < 2:
        raise ValueError(f"scores must have shape [..., n, m] (at least 2 dims), got shape {scores.shape}")
    if min(scores.shape[-2:]) < 1:
        raise ValueError(f"scores blocks must be non-empty, got shape {scores.shape}")
    if not jnp.issubdtype(scores.dtype, jnp.floating) and not jnp.issubdtype(scores.dtype, jnp.integer):
        raise ValueError(f"scores must be real-valued, got dtype {scores.dtype}")


def _check_finite_valid_cells(scores, cell_valid):
    """Eager calls refuse NaN/inf in *valid* cells; masked (padding) cells may hold anything, as under jit."""
    if isinstance(scores, jax.core.Tracer) or isinstance(cell_valid, jax.core.Tracer):
        return
    bad = ~np.isfinite(np.asarray(scores)) & np.asarray(cell_valid)
    if bad.any():
        first = np.argwhere(bad)[0]
        raise ValueError(f"scores contain non-finite values in valid cells (first at index "
                         f"{tuple(int(i) for i in first)}); refusing to match NaN/inf")


def _repair(a, perms, needs_repair, capacity_frac: float):
    """Re-solves flagged problems exactly: compacted into a static buffer, whole batch if it overflows."""
    n_problems, k = a.shape[0], a.shape[-1]
    exact = jax.vmap(_exact_solver(k))
    capacity = min(n_problems, max(8, math.ceil(capacity_frac * n_problems)))
    count = jnp.sum(needs_repair)

    def compact(perms):
        # Unused slots point at problem 0 and write back its exact solution: harmless.
        idx = jnp.nonzero(needs_repair, size=capacity, fill_value=0)[0]
        fixed = exact(a[idx])
        return perms.at[idx].set(fixed)

    def whole(perms):
        return exact(a)

    return jax.lax.cond(count > capacity, whole, compact, perms)


def _solve_square(a, method: str, options: dict):
    """a: float32[N, K, K] -> (perm int32[N, K], repaired bool[N], incomplete bool[N], gap float32[N])."""
    n_problems, k = a.shape[0], a.shape[-1]
    false = jnp.zeros((n_problems,), bool)
    zero = jnp.zeros((n_problems,), jnp.float32)
    if method == "enumerate":
        if k > ENUMERATE_MAX_K:
            raise ValueError(f"method='enumerate' supports K <= {ENUMERATE_MAX_K}, got K={k}")
        return jax.vmap(solve_enumerate)(a), false, false, zero
    if method == "hungarian":
        return jax.vmap(solve_hungarian)(a), false, false, zero
    if method == "auction":
        opts = dict(options.get("auction", {}))
        capacity_frac = opts.pop("repair_capacity_frac", 0.01)
        # solve_auction batches internally (batch-last layout, per-problem phases); no vmap here.
        res = solve_auction(a, **opts)
        perms = _repair(a, res.perm, res.needs_repair, capacity_frac) if k > 1 else res.perm
        return perms, res.needs_repair, res.incomplete, jnp.where(res.incomplete, 0.0, res.gap)
    raise ValueError(f"unknown matching method {method!r}; choose one of {SOLVERS}")


def solve_with_aux(scores, method: str = "auto", mask=None, *, pad_penalty="auto", auction=None,
                   sinkhorn=None, backend: str | None = None, auto_table=None):
    """Like `solve`, also returning diagnostics (see module docstring).

    Options: `pad_penalty` ('auto' or a float), `auction` = dict(eps_start_frac=0.005, theta=0.1, tol_cert=1e-5,
    max_iters_per_phase=16K+64, loop='while', certificate='bellman_ford', eps_final=None (1e-3 with the
    Bellman–Ford certificate, tol_cert with 'duality'), max_rounds=None, compaction=4.0, min_buffer=64,
    integer_eps=True, warm_start='dual', chunk_elems=2**18, repair_capacity_frac=0.01) — see
    `mmjax.matching.auction`;
    `sinkhorn` = dict(tau=0.05, iters=20).
    """
    scores = jnp.asarray(scores)
    _check_scores(scores)
    n, m = scores.shape[-2:]
    k = max(n, m)
    if method == "auto":
        method = choose_auto(k, backend, auto_table)
    if method == "sinkhorn":
        if mask is not None or n != m:
            raise ValueError(f"method='sinkhorn' needs square unmasked blocks, got shape {scores.shape} "
                             f"and mask={'given' if mask is not None else None}")
        _check_finite_valid_cells(scores, np.ones(scores.shape, bool))
        opts = dict(sinkhorn or {})
        flat = jax.lax.stop_gradient(scores).astype(jnp.float32).reshape((-1, n, n))
        plan = jax.vmap(lambda x: sinkhorn_plan(x, **opts))(flat).reshape(scores.shape)
        return plan, {"total": jnp.sum(plan * scores, axis=(-2, -1))}
    if method not in SOLVERS:
        raise ValueError(f"unknown matching method {method!r}; choose one of {SOLVERS}")

    row_valid, col_valid, cell_valid = normalise_masks(scores, mask)
    _check_finite_valid_cells(scores, cell_valid)
    if method == "enumerate" and mask is None and n == m and k <= ENUMERATE_MAX_K:
        # Nothing to mask or pad: one GEMM + argmax (the K = 4 training/eval case; same result as the path below).
        cols, total, nonfinite = solve_enumerate_unmasked(scores)
        zero = jnp.float32(0.0)
        return cols, {"total": total, "repaired_frac": zero, "incomplete_frac": zero, "gap_max": zero,
                      "nonfinite_frac": jnp.mean(nonfinite.astype(jnp.float32))}
    a, cell_sq, nonfinite = square_benefit(scores, row_valid, col_valid, cell_valid, pad_penalty)
    batch = scores.shape[:-2]
    flat = a.reshape((-1, k, k))
    perms, repaired, incomplete, gap = _solve_square(flat, method, {"auction": auction or {}})
    perms = perms.reshape(batch + (k,))[..., :n]
    matched_valid = jnp.take_along_axis(cell_sq[..., :n, :], perms[..., None], axis=-1)[..., 0]
    matched_valid &= ~nonfinite[..., None]
    cols = jnp.where(matched_valid, perms, -1).astype(jnp.int32)
    s = jnp.where(cell_valid, jax.lax.stop_gradient(scores), 0).astype(jnp.float32)
    picked = jnp.take_along_axis(s, jnp.clip(cols, 0, m - 1)[..., None], axis=-1)[..., 0]
    total = jnp.sum(jnp.where(cols >= 0, picked, 0.0), axis=-1)
    aux = {
        "total": total,
        "repaired_frac": jnp.mean(repaired.astype(jnp.float32)),
        "incomplete_frac": jnp.mean(incomplete.astype(jnp.float32)),
        "gap_max": jnp.max(gap),
        "nonfinite_frac": jnp.mean(nonfinite.astype(jnp.float32)),
    }
    return cols, aux


def solve(scores, method: str = "auto", mask=None, **options):
    """Maximising assignment on `scores[..., n, m]` -> `cols int32[..., n]` (see module docstring)."""
    return solve_with_aux(scores, method, mask, **options)[0]
