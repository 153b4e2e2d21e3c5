"""Bertsekas forward auction with ε-scaling (Jacobi bidding), batch-last, plus optimality certificates.

Problem (per block A[K, K], maximising): π* = argmax_π Σ_i A[i, π(i)]. State per problem: column prices p[K] and
column owners owner[K] (−1 = free); a row is assigned iff some column names it as owner.

Bidding round (all unassigned rows at once — Jacobi; Gauss–Seidel would be an O(K) sequential loop):

    V = A − p                          values of every column to every row
    j1_i = argmax_j V_ij,  v1_i = max_j V_ij,  v2_i = max_{j ≠ j1_i} V_ij
    δ_i  = v1_i − v2_i + ε             bid increment (the bid itself is p[j1_i] + δ_i = A[i, j1_i] − v2_i + ε)
    column j: p_j ← p_j + max_{i: j1_i = j} δ_i, owner_j ← that row (ties → lowest row)

All bidders on column j see the same p_j, so the winning bid is p_j + max δ_i: no gather of A[i, j1_i] is needed
(one pass over [K, K] fewer than bidding with absolute prices). Displaced owners become unassigned implicitly.
Every step is a dense select/max/argmax: no scatter, no top_k, no data-dependent branch.

Layout — batch last. `solve_auction` takes any [..., K, K] batch and runs on A transposed to [K, K, N]: every
reduction over i or j is then an elementwise max over K contiguous N-vectors, which XLA:CPU vectorises along N.
Under a plain `vmap` of a single-problem solver the batch axis is major and each reduction runs over K ≤ 32
contiguous floats (short, poorly vectorised inner loops); measured on the 2-core CPU the batch-last kernel is
several times faster per bidding round (bench/matching.py). `jax.vmap(solve_auction)` still works (correct, slower).

ε-scaling with per-problem phases. Phases k = 0..P−1 use ε_k = max(ε₀ θᵏ, ε_final), ε₀ = `eps_start_frac`·span(A),
prices carried across phases, owners reset at each phase start; a problem stops after the first phase it completes
at ε_final. A single `while_loop` carries each problem's own phase index and ε (a problem whose assignment is
complete moves to its next phase in the same round: a select, no branch), so the loop costs max_problems Σ_phases
rounds rather than Σ_phases max_problems rounds.

Why the batched loop was slow, and what fixed it (issue 11; numbers from bench/matching.py and alternated A/B runs on
the shared 2-core CPU, load average 8–12, so ratios only). A batched `while_loop` passes over every problem until the
slowest finishes: cost ≈ max rounds × batch. Kept, each measured to help:

1. Compaction (`mmjax.matching.compaction.compacting_while`, `compaction=4`, `min_buffer=64`): run on the whole
   batch while more than N/4 problems are active, then gather the active ones into N/4 slots, N/16, …; cost ≈ the
   rounds of the typical problem, not the slowest. K = 16, old parameters: 0.73× → 1.01× Hungarian (cosine),
   0.35× → 0.57× (integer ties). Shrink factor 2 was no better at K = 16 (more gathers), better at K = 8/32.
2. Integer ε (`integer_eps`): for integer-valued blocks a complete ε-CS assignment with ε < 1/K is optimal (totals
   are integers within K·ε < 1 of OPT), so those problems stop at ε = 1/(K+1) instead of 1e-3·span/(K+1): integer
   ties K = 16, mean/max rounds 142/383 → 40/122.
3. Warm start (`warm_start='dual'`): initial prices p_j = max_i (A_ij − max_j′ A_ij′), the column part of a feasible
   dual of the row-reduced matrix; with a small ε₀ (`eps_start_frac=0.005`, `theta=0.1`, 1–3 phases) mean rounds at
   K = 16 fell 52 → 22 (cosine) and 40 → 7 (ties). ε₀ ∈ {0.25, 0.1, 0.05, 0.02, 0.01, 0.005, 0.001} × θ ∈ {0.05,
   0.1, 0.2, 0.25, 0.5} were swept (element-rounds per problem); θ = 0.5 and ε₀ = 0.25 were worst.
4. Cheaper exact certificate (`mmjax.matching.certificate`): Bellman–Ford in column space is a max-plus
   matrix–vector product (2 element-ops per entry instead of ~6 with one-hot gathers), per problem early exit, with
   compaction; 15 → ~5 full-batch relaxations at K = 16.
5. Chunking (`chunk_elems=2**18`): the batch is solved in sequential chunks of ≈ 2¹⁸/K² problems (`lax.map`) so a
   chunk's [K, K, n] working set stays in cache: one bidding round at K = 8 cost 0.27 µs/problem at n ≤ 5 120 but
   1.27 µs at n = 20 480 (XLA:CPU keeps K − 1 [K, n] predicates live). K = 8, 20 480 blocks: 0.41× → 0.67×
   Hungarian (cosine). 2¹⁷ was better at K = 8 and worse at K = 16/32. On an accelerator use chunk_elems=None.

Result (same A/B runs, vs vmapped optax Hungarian): K = 8 cosine 0.67×, ties 1.24×; K = 16 cosine 2.25×, ties 3.45×;
K = 32 cosine 1.72×, ties 6.4×; exact after certificate + repair on every sampled problem; see docs/benchmarks.md
for the bench run. Not tried: keeping ε-CS assignments across phases (needs ~4 more element-ops per entry and round
to find the violating rows; the small ε₀ already leaves only 1–3 phases). Tried and dropped earlier: a total round
budget (`max_rounds`, still available) leaves most problems uncertified (75% at 64 rounds, K = 16).

Certificates (after the loop, `mmjax.matching.certificate`), with π the final permutation and any prices p:

    gap(p) = Σ_i [ max_j (A_ij − p_j) − (A_{iπ(i)} − p_{π(i)}) ] = D(p) − P ≥ OPT − P ≥ 0

- `certificate='duality'`: p = the auction's prices; ε-CS gives gap ≤ K·ε_final, so ε_final must be tol·s/(K+1).
- `certificate='bellman_ford'` (exact, default): relaxes p to longest-path potentials of the exchange graph; the gap
  is 0 (up to rounding) iff π is optimal. So the auction stops at a coarse ε_final (`eps_final` = 1e-3 relative:
  ≈ 99.6–99.9% certified on random cosine blocks; 1e-2 dropped it to ~97.7%, which would overflow the 1% repair
  buffer) and only problems within ~K·ε_final of another assignment are repaired exactly.

Scale. s = max(1, span) makes the tolerances absolute for spans below 1; a problem whose span is below 2⁻¹⁰ (or above
2⁶⁴) is therefore solved as f·A with f an exact power of two putting its span in [1, 2) (`mmjax.matching.scaling`;
same optimum, gap reported in the input's units), so tol·s is relative to the span at every magnitude. Before this,
any matching passed the certificate once span < tol (normal scores × 1e-6). Spans in [2⁻¹⁰, 2⁶⁴] get f = 1.0 exactly
(bit-for-bit the previous arithmetic).

A problem is flagged (`needs_repair`) if it hit the iteration cap with rows unassigned or gap > tol·s;
`mmjax.matching.solve` repairs flagged problems with an exact solver, so the returned total is within tol·s of the
optimum on every problem (and exactly optimal for integer-valued A whenever tol·s < 1).
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from mmjax.matching.certificate import CERTIFICATES, certificate_gap, certify  # noqa: F401 (re-exported)
from mmjax.matching.compaction import compacting_while, stage_capacities
from mmjax.matching.scaling import pow2_factors

_NEG = -1e30  # finite "minus infinity" for masked maxima (inputs are checked finite upstream)


# Reductions on the batch-last layout are written as Python-unrolled chains of elementwise ops on [K, N] slices
# (K ≤ 32): XLA fuses each chain into one vectorised loop over N. The obvious `jnp.max/argmax(axis=…)` and
# variadic-reduce forms were measured 3–30x slower per bidding round on the 2-core CPU (XLA:CPU compiled
# reduce_max over the major axis of [K, K, N] to 11.6 ms vs 0.24 ms unrolled at K = 16, N = 4096, and a round built
# from variadic reduces took 6–20 ms vs 1.7 ms unrolled).
def _all0_reduce(x, op):
    """op-reduction over axis 0 of a small [K, N] array, unrolled."""
    out = x[0]
    for r in range(1, x.shape[0]):
        out = op(out, x[r])
    return out


def _all0(x):
    return _all0_reduce(x, jnp.logical_and)


def _max_over_j(x):
    """max_j x[:, j] for x[K(i), K(j), N] -> [K(i), N]."""
    out = x[:, 0]
    for j in range(1, x.shape[1]):
        out = jnp.maximum(out, x[:, j])
    return out


class AuctionResult(NamedTuple):
    perm: jnp.ndarray           # int32[..., K]; meaningful only where complete
    needs_repair: jnp.ndarray   # bool[...]: incomplete or certificate gap above tolerance
    incomplete: jnp.ndarray     # bool[...]: iteration cap reached with rows unassigned
    gap: jnp.ndarray            # float32[...]: certified bound on OPT − total (1e30 if incomplete)
    iterations: jnp.ndarray     # int32[...]: bidding rounds over all phases
    trips: jnp.ndarray          # int32[C, S + 1]: bidding-loop iterations per sequential chunk and compaction stage
    cert_trips: jnp.ndarray     # int32[C, S + 1]: Bellman–Ford relaxations per chunk and stage (0 for 'duality')


def num_phases(k: int, eps_start_frac: float, theta: float, tol_cert: float) -> int:
    """Static phase count taking ε from ε₀ = eps_start_frac·span down to ε_final = tol_cert·s/(K+1)."""
    ratio = eps_start_frac * (k + 1) / tol_cert
    return max(1, math.ceil(math.log(max(ratio, 1.0)) / math.log(1.0 / theta))) + 1


def default_max_iters(k: int) -> int:
    return 16 * k + 64


def default_eps_final(certificate: str, tol_cert: float) -> float:
    """Relative ε_final (times s/(K+1)): tol for the duality certificate; coarse for the exact Bellman–Ford one."""
    return tol_cert if certificate == "duality" else DEFAULT_BF_EPS_FINAL


# Relative ε_final used with certificate='bellman_ford' (see bench/matching.py and the module docstring).
DEFAULT_BF_EPS_FINAL = 1e-3


def _bid_round(consts, state, *, theta, phases, cap, budget):
    """One Jacobi bidding round for every unfinished problem of a[K(i), K(j), N] (module docstring).

    Finished problems (done) are left exactly as they are, as `compacting_while` requires.
    """
    a, eps_hi, eps_lo = consts
    owner, prices, eps, phase, it_phase, done, iters = state
    k, n = owner.shape
    rowid = jax.lax.broadcasted_iota(jnp.int32, (k, n), 0)
    # Row i is free iff no column names it ([K, K] int compares; a row->column array would need the same compares
    # to update, so "assigned" is derived).
    free = jnp.ones((k, n), bool)
    for j in range(k):
        free = free & (owner[j][None, :] != rowid)
    # Best / second-best column per row in one sweep over j (ties → lowest j; v2 = v1 on ties).
    v1, j1, v2 = a[:, 0] - prices[0][None, :], jnp.zeros((k, n), jnp.int32), jnp.full((k, n), _NEG, jnp.float32)
    for j in range(1, k):
        v = a[:, j] - prices[j][None, :]
        better = v > v1
        v2 = jnp.where(better, v1, jnp.maximum(v2, v))
        j1 = jnp.where(better, j, j1)
        v1 = jnp.where(better, v, v1)
    inc = jnp.where(free & ~done[None, :], v1 - v2 + eps[None, :], _NEG)   # [K(i), N]; stopped problems idle
    # Each column keeps the largest increment offered to it (ties → lowest row): sweep over bidders i.
    best, winner = jnp.full((k, n), _NEG, jnp.float32), jnp.zeros((k, n), jnp.int32)
    for i in range(k):
        offer = jnp.where(j1[i][None, :] == rowid, inc[i][None, :], _NEG)   # [K(j), N]
        better = offer > best
        best = jnp.where(better, offer, best)
        winner = jnp.where(better, i, winner)
    got = best > _NEG / 2
    owner = jnp.where(got, winner, owner)
    prices = jnp.where(got, prices + best, prices)
    # Per-problem phase bookkeeping (selects only). Stopped problems make no bids and keep their counters.
    complete = _all0(owner >= 0)
    live = ~done
    it_phase = it_phase + live.astype(jnp.int32)
    iters = iters + live.astype(jnp.int32)
    # A phase at ε_final is the last one (later phases would repeat it). Out of budget: stop as is; a complete
    # assignment still goes to the certificate, an incomplete one to repair.
    stop = (iters >= budget) | (phase >= phases - 1) | (eps <= eps_lo)
    advance = complete & live & ~stop
    finish = live & ((complete & stop) | (~complete & ((it_phase >= cap) | (iters >= budget))))
    done = done | finish
    phase = phase + advance.astype(jnp.int32)
    eps = jnp.where(advance, jnp.maximum(eps_hi * theta ** phase.astype(jnp.float32), eps_lo), eps)
    owner = jnp.where(advance[None, :], -1, owner)
    it_phase = jnp.where(advance, 0, it_phase)
    return owner, prices, eps, phase, it_phase, done, iters


def _solve_block(a, *, opts):
    """Auction + certificate on one batch-last block a[K(i), K(j), N] -> per-problem results and trip counts."""
    k, n = a.shape[0], a.shape[-1]
    amax = _max_over_j(a)
    amin = -_max_over_j(-a)
    span = _all0_reduce(amax, jnp.maximum) - _all0_reduce(amin, jnp.minimum)
    # A problem whose span is far from 1 (below 2⁻¹⁰, above 2⁶⁴) is solved as f·A, f an exact power of two with
    # f·span ∈ [1, 2), so the tolerances below (∝ max(1, span)) are relative to its span; f = 1.0 exactly otherwise,
    # which leaves every other problem's arithmetic bit-for-bit unchanged (mmjax.matching.scaling).
    f, inv_f = pow2_factors(span)
    a, amax, amin, span = a * f, amax * f, amin * f, span * f
    scale = jnp.maximum(1.0, span)
    eps_lo = opts["eps_rel"] * scale / (k + 1)
    if opts["integer_eps"]:
        # Integer benefits: a complete assignment in ε-CS with ε < 1/K is optimal (totals are integers and differ
        # from OPT by < K·ε < 1), so such problems need not go below ε = 1/(K+1).
        is_int = _all0(_all0(a == jnp.round(a)))
        eps_lo = jnp.where(is_int, jnp.maximum(eps_lo, 1.0 / (k + 1)), eps_lo)
    eps_hi = jnp.maximum(opts["eps_start_frac"] * span, eps_lo)
    if opts["warm_start"] == "dual":
        # Prices of a feasible dual of the row-reduced matrix: u_i = max_j A_ij, p_j = max_i (A_ij − u_i) ≤ 0.
        p0 = a[0] - amax[0][None, :]
        for i in range(1, k):
            p0 = jnp.maximum(p0, a[i] - amax[i][None, :])
    else:
        p0 = jnp.zeros((k, n), jnp.float32)
    phases = opts["phases"]
    consts = (a, eps_hi, eps_lo)
    state = (jnp.full((k, n), -1, jnp.int32), p0, jnp.where(phases > 1, eps_hi, eps_lo), jnp.zeros((n,), jnp.int32),
             jnp.zeros((n,), jnp.int32), jnp.zeros((n,), bool), jnp.zeros((n,), jnp.int32))
    body = functools.partial(_bid_round, theta=opts["theta"], phases=phases, cap=opts["cap"], budget=opts["budget"])
    caps = stage_capacities(n, opts["compaction"], opts["min_buffer"]) if opts["compaction"] else ()
    if opts["loop"] == "while":
        state, trips = compacting_while(body, lambda s: s[5], consts, state, caps)
    else:
        state = jax.lax.scan(lambda s, _: (body(consts, s), None), state, None, length=phases * opts["cap"])[0]
        trips = jnp.full((1,), phases * opts["cap"], jnp.int32)
    owner, prices, _, _, _, _, iters = state
    incomplete = ~_all0(owner >= 0)
    gap, perm, cert_trips = certify(a, owner, prices, opts["certificate"], caps)
    gap = jnp.where(incomplete, jnp.float32(1e30), gap)
    needs_repair = incomplete | (gap > opts["tol_cert"] * scale)
    gap = jnp.where(incomplete, jnp.float32(1e30), gap * inv_f)            # back in the units of the input
    return perm, needs_repair, incomplete, gap, iters, trips, cert_trips


def chunk_size(k: int, chunk_elems: int | None, n: int) -> int:
    """Problems per sequential chunk: K²·chunk ≈ chunk_elems keeps a chunk's working set in cache (None: all)."""
    if not chunk_elems:
        return n
    target = max(1, min(n, max(64, chunk_elems // (k * k))))
    chunks = -(-n // target)
    return -(-n // chunks)                                # equal chunks: at most chunks − 1 padding blocks


def solve_auction(benefit: jnp.ndarray, *, eps_start_frac: float = 0.005, theta: float = 0.1,
                  tol_cert: float = 1e-5, max_iters_per_phase: int | None = None,
                  loop: str = "while", certificate: str = "bellman_ford",
                  eps_final: float | None = None, max_rounds: int | None = None, compaction: float = 4.0,
                  min_buffer: int = 64, integer_eps: bool = True, warm_start: str = "dual",
                  chunk_elems: int | None = 2 ** 18) -> AuctionResult:
    """Auction on `benefit[..., K, K]` (maximising; any leading batch shape). See the module docstring.

    eps_final: relative final ε (ε_final = eps_final·max(1, span)/(K+1)); default tol_cert for
    certificate='duality' and `DEFAULT_BF_EPS_FINAL` for certificate='bellman_ford'.
    max_rounds: optional budget of bidding rounds per problem over all phases; a problem still incomplete after it
    is flagged (incomplete, repaired exactly by `mmjax.matching.solve`).
    compaction / min_buffer: shrink factor and smallest buffer of `compacting_while` (0 disables compaction).
    integer_eps: stop integer-valued problems at ε = 1/(K+1) (exact by ε-CS). warm_start: 'dual' or 'none'.
    chunk_elems: the batch is solved in sequential chunks of ≈ chunk_elems/K² problems (None: one chunk).
    """
    benefit = jnp.asarray(benefit)
    if benefit.ndim < 2 or benefit.shape[-1] != benefit.shape[-2]:
        raise ValueError(f"solve_auction needs square blocks [..., K, K], got shape {benefit.shape}")
    batch, k = benefit.shape[:-2], benefit.shape[-1]
    if k == 1:
        return AuctionResult(jnp.zeros(batch + (1,), jnp.int32), jnp.zeros(batch, bool), jnp.zeros(batch, bool),
                             jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.int32),
                             jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32))
    if not 0.0 < theta < 1.0:
        raise ValueError(f"auction theta must be in (0, 1), got {theta}")
    if loop not in ("while", "scan"):
        raise ValueError(f"auction loop must be 'while' or 'scan', got {loop!r}")
    if certificate not in CERTIFICATES:
        raise ValueError(f"auction certificate must be one of {CERTIFICATES}, got {certificate!r}")
    if warm_start not in ("none", "dual"):
        raise ValueError(f"auction warm_start must be 'none' or 'dual', got {warm_start!r}")
    eps_rel = default_eps_final(certificate, tol_cert) if eps_final is None else float(eps_final)
    if not eps_rel > 0.0:
        raise ValueError(f"auction eps_final must be > 0, got {eps_final}")
    cap = default_max_iters(k) if max_iters_per_phase is None else int(max_iters_per_phase)
    phases = num_phases(k, eps_start_frac, theta, eps_rel)
    opts = dict(eps_rel=eps_rel, eps_start_frac=eps_start_frac, theta=theta, tol_cert=tol_cert, cap=cap,
                phases=phases, budget=phases * cap if max_rounds is None else int(max_rounds), loop=loop,
                certificate=certificate, compaction=compaction, min_buffer=min_buffer, integer_eps=integer_eps,
                warm_start=warm_start)

    flat = benefit.astype(jnp.float32).reshape((-1, k, k))
    n = flat.shape[0]
    if n == 0:                                            # empty batch: nothing to solve (as vmap would return)
        return AuctionResult(jnp.zeros(batch + (k,), jnp.int32), jnp.zeros(batch, bool), jnp.zeros(batch, bool),
                             jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.int32),
                             jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32))
    size = chunk_size(k, chunk_elems, n)
    chunks = -(-n // size)
    # Pad with identity blocks (solved in one round, certified at once) and drop them again below.
    pad = jnp.broadcast_to(jnp.eye(k, dtype=jnp.float32), (chunks * size - n, k, k))
    blocks = jnp.concatenate([flat, pad]).reshape((chunks, size, k, k))
    out = jax.lax.map(lambda x: _solve_block(jnp.moveaxis(x, 0, -1), opts=opts), blocks)
    perm, needs_repair, incomplete, gap, iters, trips, cert_trips = out

    def per_problem(x):                                   # [chunks, ..., size] -> batch + (...)
        x = jnp.moveaxis(x, -1, 1).reshape((chunks * size,) + x.shape[1:-1])[:n]
        return x.reshape(batch + x.shape[1:])

    return AuctionResult(per_problem(perm), per_problem(needs_repair), per_problem(incomplete), per_problem(gap),
                         per_problem(iters), trips, cert_trips)
