"""Linear assignment on (batches of) small score blocks — `mmjax.matching`.

    π* = argmax_π Σ_i scores[i, π(i)]        (maximisation; rectangular n×m blocks match min(n, m) pairs)

Public API:

- `solve(scores, method="auto", mask=None, **options) -> cols int32[..., n]` — `cols[..., i]` is the column matched to
  row i, or −1 when row i has no valid partner (excess rows of a rectangular block, masked rows, problems with
  non-finite scores). Jittable and vmappable, no host callbacks; scores are treated as constants (stop_gradient);
  gradients flow through the caller's gather of the matched scores, never through a solver. An eager call (a
  notebook's) runs the solver compiled, one cached program per shape and options, not op by op; under a caller's
  jit/vmap/grad it is traced into the caller's program as before.
- `solve_with_aux(...) -> (cols, aux)` with per-batch diagnostics: `total[...]` (sum of matched valid scores),
  `repaired_frac`, `incomplete_frac`, `gap_max` (auction), `nonfinite_frac`, `inexact_frac`. Options of both (a
  wrong key raises TypeError naming the valid ones): see `solve`.
- `sinkhorn_plan(scores[..., K, K], tau=0.05, iters=20) -> plan float32[..., K, K]` — the entropic soft plan of
  the Sinkhorn ablation (similarity kind `sinkhorn_soft`); square unmasked blocks, any leading batch shape,
  differentiable. It is not an assignment, so `solve` refuses `method='sinkhorn'` (ValueError pointing here): every
  `solve` returns int32 columns. `SOFT_PLANS` names such soft-plan methods.
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
`aux["nonfinite_frac"]`, all its rows come back −1 (never silently matched) and its `aux["total"]` is NaN.

Input dtype and magnitude (details in `solve`): the solvers compute in float32; a conversion to float32 that would
change a valid value (int32 beyond ±2²⁴, float64 under x64) is refused — ValueError naming the dtype eagerly, the
problem treated like a non-finite one under `jit` (`aux["inexact_frac"]`). Blocks of magnitude far from 1 (largest
valid |score| outside [2⁻¹⁰, 2⁶⁴]) are solved after an exact power-of-two rescaling (`mmjax.matching.scaling`).
An empty batch (a 0 in `scores.shape[:-2]`) returns empty results.
"""

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np

from mmjax.matching.auction import solve_auction, AuctionResult, num_phases
from mmjax.matching.enumerate import solve_enumerate, solve_enumerate_unmasked, MAX_K as ENUMERATE_MAX_K
from mmjax.matching.hungarian import solve_hungarian
from mmjax.matching.padding import normalise_masks, square_benefit
from mmjax.matching.sinkhorn import sinkhorn_plan as _sinkhorn_block

__all__ = ["solve", "solve_with_aux", "sinkhorn_plan", "SOLVERS", "SOFT_PLANS", "AUTO_TABLE", "choose_auto",
           "solve_enumerate", "solve_hungarian", "solve_auction", "AuctionResult", "num_phases"]

SOLVERS = ("enumerate", "auction", "hungarian", "auto")   # methods of `solve`: int32 columns
SOFT_PLANS = ("sinkhorn",)                                 # soft plans, not assignments: `sinkhorn_plan`, never `solve`

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


def sinkhorn_plan(scores, tau: float = 0.05, iters: int = 20):
    """Entropic soft plan float32[..., K, K] of square blocks `scores[..., K, K]` (any leading batch shape; no masks):
    `iters` log-domain Sinkhorn iterations on scores/τ (`mmjax.matching.sinkhorn`). Columns sum to 1, rows up to the
    convergence error; as τ → 0 the plan concentrates on the optimal permutation. Differentiable (apply
    `stop_gradient` to hold it fixed); no eager NaN check (a NaN score makes its block's plan NaN)."""
    scores = jnp.asarray(scores)
    if scores.ndim < 2 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f"sinkhorn_plan needs square unmasked blocks [..., K, K], got shape {scores.shape}")
    if scores.ndim == 2:
        return _sinkhorn_block(scores, tau, iters)
    k = scores.shape[-1]
    flat = scores.reshape((-1, k, k))
    return jax.vmap(lambda x: _sinkhorn_block(x, tau, iters))(flat).reshape(scores.shape)


def _check_method(method: str, sinkhorn=None) -> None:
    if method in SOFT_PLANS:
        given = ", ".join(f"{k}={v!r}" for k, v in (sinkhorn or {}).items()) or "tau, iters"
        raise ValueError(f"matching.solve: method={method!r} gives a soft plan (float [..., n, n]), not an assignment, "
                         f"and solve always returns int32 columns; call mmjax.matching.sinkhorn_plan(scores, {given}) "
                         f"for the soft plan (or use the similarity kind 'sinkhorn_soft')")
    if method not in SOLVERS:
        raise ValueError(f"unknown matching method {method!r}; choose one of {SOLVERS}")


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


# Keyword options of `solve` / `solve_with_aux`, and the keys of their dict-valued options.
OPTIONS = ("pad_penalty", "auction", "sinkhorn", "backend", "auto_table")
AUCTION_OPTIONS = tuple(inspect.signature(solve_auction).parameters)[1:] + ("repair_capacity_frac",)
SINKHORN_OPTIONS = ("tau", "iters")


def _check_options(options: dict):
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"matching.solve: unknown option(s) {', '.join(map(repr, unknown))}; valid options: "
                        f"{', '.join(OPTIONS)}")
    for name, valid in (("auction", AUCTION_OPTIONS), ("sinkhorn", SINKHORN_OPTIONS)):
        given = options.get(name) or {}
        unknown = sorted(set(given) - set(valid))
        if unknown:
            raise TypeError(f"matching.solve: unknown {name} option(s) {', '.join(map(repr, unknown))}; valid "
                            f"{name} options: {', '.join(valid)}")


def _float32_exact_dtype(dtype) -> bool:
    """Whether every value of `dtype` is exactly a float32 (then the conversion cannot change a problem)."""
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.iinfo(dtype).bits <= 16
    fi = jnp.finfo(dtype)
    return fi.nmant <= 23 and fi.maxexp <= 128 and fi.minexp >= -126


def _to_float32(scores, cell_valid):
    """(scores as float32, inexact bool[...] or None): blocks whose valid cells change value in the conversion.

    float32 / float16 / bfloat16 / (u)int8 / (u)int16 convert exactly (inexact None: nothing is added to the graph).
    For other dtypes (int32, int64, uint32, float64 under x64, …) a valid finite cell is inexact if its float32 image
    differs from it (integers beyond ±2²⁴, float64 digits beyond float32's, or beyond float32's range → inf).
    """
    if scores.dtype == jnp.float32:
        return scores, None
    x32 = jax.lax.stop_gradient(scores).astype(jnp.float32)
    if _float32_exact_dtype(scores.dtype):
        return x32, None
    x = jax.lax.stop_gradient(scores)
    if jnp.issubdtype(scores.dtype, jnp.integer):
        info = jnp.iinfo(scores.dtype)
        # Compare in the integer dtype, after checking the float32 value is in range (a float→int cast saturates,
        # so 2³¹ − 1 → 2³¹ → 2³¹ − 1 would otherwise look exact).
        in_range = (x32 >= float(info.min)) & (x32 < float(info.max) + 1.0)
        changed = ~in_range | (jnp.where(in_range, x32, 0.0).astype(scores.dtype) != x)
    else:
        changed = jnp.isfinite(x) & (x32.astype(scores.dtype) != x)
    changed &= cell_valid
    if not isinstance(changed, jax.core.Tracer) and bool(jnp.any(changed)):
        first = tuple(int(i) for i in np.argwhere(np.asarray(changed))[0])
        raise ValueError(
            f"scores of dtype {scores.dtype} are not exactly representable in float32, which the solvers compute in "
            f"(first at index {first}: {np.asarray(x)[first]!r} -> {np.asarray(x32)[first]!r}); the optimum could "
            f"change, so this is refused: convert explicitly (scores.astype(float32)) if the rounding is acceptable, "
            f"or shift/rescale the scores into float32's exact range (integers within ±2**24)")
    return x32, jnp.any(changed, axis=(-2, -1))


def _empty_result(batch, n, method):
    """The result for a batch with no problems (shape (..., 0, ...)), as a vmap over an empty axis returns it."""
    cols = jnp.zeros(batch + (n,), jnp.int32)
    zero = jnp.float32(0.0)
    return cols, {"total": jnp.zeros(batch, jnp.float32), "repaired_frac": zero, "incomplete_frac": zero,
                  "gap_max": zero, "nonfinite_frac": zero, "inexact_frac": zero}


def solve_with_aux(scores, method: str = "auto", mask=None, **options):
    """Like `solve`, also returning diagnostics: `(cols, aux)`.

    aux (per call; `total` per problem, the others over the batch): `total[...]` (sum of the matched valid scores,
    in float32; NaN for a problem with a non-finite or inexact valid cell), `repaired_frac` (problems the auction
    could not certify and an exact solver re-solved), `incomplete_frac` (problems the auction left incomplete),
    `gap_max` (largest certified auction gap, in score units), `nonfinite_frac` (problems with NaN/inf in a valid
    cell after the float32 conversion), `inexact_frac` (problems with a valid cell that the float32 conversion
    changed). An empty batch gives empty `cols`/`total` and 0.0 for the fractions and `gap_max`.
    Options: see `solve`.
    """
    _check_options(options)
    return _solve_with_aux(scores, method, mask, **options)


def _solve_with_aux(scores, method, mask, *, pad_penalty="auto", auction=None, sinkhorn=None,
                    backend: str | None = None, auto_table=None):
    _check_method(method, sinkhorn)
    scores = jnp.asarray(scores)
    _check_scores(scores)
    n, m = scores.shape[-2:]
    k = max(n, m)
    batch = scores.shape[:-2]
    if method == "auto":
        method = choose_auto(k, backend, auto_table)
    if method == "enumerate" and k > ENUMERATE_MAX_K:
        raise ValueError(f"method='enumerate' supports K <= {ENUMERATE_MAX_K}, got K={k}")

    row_valid, col_valid, cell_valid = normalise_masks(scores, mask)
    _check_finite_valid_cells(scores, cell_valid)
    scores, inexact = _to_float32(scores, cell_valid)      # refuses (eagerly) a conversion that changes a value
    if math.prod(batch) == 0:
        return _empty_result(batch, n, method)
    static = dict(method=method, unmasked=mask is None, pad_penalty=pad_penalty,
                  auction=tuple(sorted((auction or {}).items())))
    arrays = (scores, row_valid, col_valid, cell_valid, inexact)
    # Inside the caller's trace (jit, vmap, grad) the solver joins its graph, as before; so does an option value jit
    # cannot key on (a pad_penalty array), solved op by op.
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(arrays))
    if traced or not _hashable(tuple(static.values())):
        return _solve_core(*arrays, **static)
    # An eager call: the solver compiled as one program per shape and options. Op by op, a K = 9 auction took
    # 5.7 s per call on the 2-core CPU (its loops re-traced each time); compiled, a repeated call takes ~2 ms.
    return _solve_core_jit(*arrays, **static)



def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _solve_core(scores, row_valid, col_valid, cell_valid, inexact, *, method, unmasked, pad_penalty, auction):
    """The array part of `solve_with_aux` (checks and the empty batch done): float32 scores, the masks from
    `normalise_masks`, `inexact` from `_to_float32` (None when the conversion was exact) -> (cols, aux)."""
    n, m = scores.shape[-2:]
    k = max(n, m)
    batch = scores.shape[:-2]
    auction = dict(auction)
    no_inexact = jnp.float32(0.0)
    if method == "enumerate" and unmasked and n == m and k <= ENUMERATE_MAX_K:
        # Nothing to mask or pad: one GEMM + argmax (the K = 4 training/eval case; same result as the path below).
        cols, total, nonfinite = solve_enumerate_unmasked(scores)
        if inexact is not None:
            cols = jnp.where(inexact[..., None], -1, cols)
            total = jnp.where(inexact, jnp.nan, total)
            no_inexact = jnp.mean(inexact.astype(jnp.float32))
        zero = jnp.float32(0.0)
        return cols, {"total": total, "repaired_frac": zero, "incomplete_frac": zero, "gap_max": zero,
                      "nonfinite_frac": jnp.mean(nonfinite.astype(jnp.float32)), "inexact_frac": no_inexact}
    a, cell_sq, nonfinite, inv_scale = square_benefit(scores, row_valid, col_valid, cell_valid, pad_penalty)
    flat = a.reshape((-1, k, k))
    perms, repaired, incomplete, gap = _solve_square(flat, method, {"auction": auction or {}})
    perms = perms.reshape(batch + (k,))[..., :n]
    bad = nonfinite if inexact is None else nonfinite | inexact
    matched_valid = jnp.take_along_axis(cell_sq[..., :n, :], perms[..., None], axis=-1)[..., 0]
    matched_valid &= ~bad[..., None]
    cols = jnp.where(matched_valid, perms, -1).astype(jnp.int32)
    s = jnp.where(cell_valid, jax.lax.stop_gradient(scores), 0).astype(jnp.float32)
    picked = jnp.take_along_axis(s, jnp.clip(cols, 0, m - 1)[..., None], axis=-1)[..., 0]
    total = jnp.sum(jnp.where(cols >= 0, picked, 0.0), axis=-1)
    total = jnp.where(bad, jnp.nan, total)               # a refused problem has no total (eager calls raise)
    if inexact is not None:
        no_inexact = jnp.mean(inexact.astype(jnp.float32))
    aux = {
        "total": total,
        "repaired_frac": jnp.mean(repaired.astype(jnp.float32)),
        "incomplete_frac": jnp.mean(incomplete.astype(jnp.float32)),
        "gap_max": jnp.max(gap * inv_scale.reshape(-1)),   # back in score units (× 1.0 for ordinary magnitudes)
        "nonfinite_frac": jnp.mean(nonfinite.astype(jnp.float32)),
        "inexact_frac": no_inexact,
    }
    return cols, aux


_solve_core_jit = jax.jit(_solve_core, static_argnames=("method", "unmasked", "pad_penalty", "auction"))


def solve(scores, method: str = "auto", mask=None, **options):
    """Maximising assignment on `scores[..., n, m]` -> `cols int32[..., n]` (see the module docstring).

    method: 'auto' (default; by K and backend from `AUTO_TABLE`), 'enumerate' (K <= 8), 'hungarian' or 'auction'
    (`SOLVERS`). 'sinkhorn' is refused with a ValueError: its soft plan is not an assignment — call
    `sinkhorn_plan(scores, tau, iters)`.
    mask: None, `(row_mask[..., n], col_mask[..., m])` or a cell mask `[..., n, m]`.

    Options (keyword only; anything else raises TypeError naming these):
      pad_penalty: 'auto' (default: (2K + 1)·max(1, max |valid score|)) or a finite positive float — the penalty of
        matching a valid element with padding (`mmjax.matching.padding`);
      auction: dict of `solve_auction` options (eps_start_frac=0.005, theta=0.1, tol_cert=1e-5,
        max_iters_per_phase=16K+64, loop='while', certificate='bellman_ford', eps_final=None (1e-3 with the
        Bellman–Ford certificate, tol_cert with 'duality'), max_rounds=None, compaction=4.0, min_buffer=64,
        integer_eps=True, warm_start='dual', chunk_elems=2**18) plus repair_capacity_frac=0.01 — see
        `mmjax.matching.auction`;
      sinkhorn: dict(tau=0.05, iters=20) — keys checked, otherwise unused here (accepted so that `config.matching`
        can be passed whole; the soft plan is `sinkhorn_plan`);
      backend: the backend row of `AUTO_TABLE` for 'auto' (default: jax.default_backend());
      auto_table: a table replacing `AUTO_TABLE` for 'auto'.

    Input dtype: the solvers compute in float32. float32, float16, bfloat16 and (u)int8/16 scores convert exactly.
    Other dtypes (int32/int64/uint32, float64 under x64) are accepted only where every valid value converts exactly:
    an eager call raises ValueError naming the dtype otherwise (e.g. int32 2**25 + 2, float64 1e8 + 1, or float64
    values beyond float32's range), and under jit such a problem is refused like a non-finite one (all rows −1,
    `aux["total"]` NaN, counted in `aux["inexact_frac"]`). Convert with `.astype(float32)` to accept the rounding.

    Magnitude: a block whose largest valid |score| is outside [2⁻¹⁰, 2⁶⁴] is solved after an exact power-of-two
    rescaling (`mmjax.matching.scaling`), so every solver is exact from ~1e-30 to ~3e38 (padding penalties cannot
    overflow, the auction's certificate stays relative); other blocks are solved bit-for-bit as before.

    Empty batch (`scores.shape[:-2]` contains 0): returns `cols` of shape `[..., n]` with no problems, eagerly and
    under jit.
    """
    return solve_with_aux(scores, method, mask, **options)[0]
