"""Bertsekas forward auction with ε-scaling (Jacobi bidding), plus a duality certificate.

One square block A[K, K] is solved by maximising Σ_i A[i, π(i)]. State: column prices p[K] and column owners
owner[K] (−1 = free); a row is assigned iff some column names it as owner.

Bidding round (all unassigned rows at once — Jacobi; Gauss–Seidel would be an O(K) sequential loop):

    V = A − p                          values of every column to every row
    j1_i = argmax_j V_ij,  v1_i = max_j V_ij,  v2_i = max_{j ≠ j1_i} V_ij
    b_i  = A[i, j1_i] − v2_i + ε       (= p[j1_i] + (v1_i − v2_i) + ε)
    each column j takes the highest bid it received (ties → lowest row): owner_j ← winner, p_j ← bid

Displaced owners become unassigned implicitly. Every step is a dense [K, K] select/max/argmax: no scatter, no top_k,
no data-dependent branch, so the loop vmaps well (a batched `lax.cond` would run both branches anyway).

ε-scaling: phases k = 0..P−1 with ε_k = max(ε₀ θᵏ, ε_final), ε₀ = `eps_start_frac`·span(A), ε_final =
tol·s/(K+1) where s = max(1, span(A)) makes the tolerance relative for large-valued inputs. Prices are carried across
phases; the assignment is reset at each phase start. P is static: ⌈log_{1/θ}(ε₀/ε_final)⌉ + 1 with ε₀/ε_final bounded by
`eps_start_frac`·(K+1)/tol for every input.

Certificate (after the last phase): with perm π and prices p,

    gap = Σ_i [ max_j (A_ij − p_j) − (A_{iπ(i)} − p_{π(i)}) ]  = D − P ≥ OPT − P  ≥ 0

(weak duality: P ≤ OPT ≤ D = Σ_j p_j + Σ_i max_j (A_ij − p_j)). Each summand is small and non-negative, so the sum is
accurate in float32. ε-complementary slackness gives gap ≤ K·ε_final < tol·s when the last phase completes. A problem
is flagged for repair if any row is unassigned (iteration cap hit) or gap > tol·s; `mmjax.matching.solve` repairs
flagged problems with an exact solver, so the returned total is within tol·max(1, span(A)) of the optimum on every
problem, and exactly optimal for integer-valued A whenever that bound is < 1.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

_NEG = -1e30  # finite "minus infinity" for masked maxima (inputs are checked finite upstream)


class AuctionResult(NamedTuple):
  perm: jnp.ndarray           # int32[K]; meaningful only where complete
  needs_repair: jnp.ndarray   # bool[]: incomplete or certificate gap above tolerance
  incomplete: jnp.ndarray     # bool[]: iteration cap reached with rows unassigned
  gap: jnp.ndarray            # float32[]: duality gap of the final assignment (inf-free; large if incomplete)
  iterations: jnp.ndarray     # int32[]: bidding rounds over all phases


def num_phases(k: int, eps_start_frac: float, theta: float, tol_cert: float) -> int:
  """Static phase count taking ε from ε₀ down to ε_final in factors of θ."""
  ratio = eps_start_frac * (k + 1) / tol_cert
  return max(1, math.ceil(math.log(max(ratio, 1.0)) / math.log(1.0 / theta))) + 1


def default_max_iters(k: int) -> int:
  return 16 * k + 64


def solve_auction(benefit: jnp.ndarray, *, eps_start_frac: float = 0.25, theta: float = 0.25,
                  tol_cert: float = 1e-5, max_iters_per_phase: int | None = None,
                  loop: str = "while") -> AuctionResult:
  """Auction on one square block `benefit[K, K]` (maximising). See the module docstring."""
  a = benefit.astype(jnp.float32)
  k = a.shape[-1]
  if k == 1:
    zero = jnp.zeros((), jnp.float32)
    return AuctionResult(jnp.zeros((1,), jnp.int32), jnp.array(False), jnp.array(False), zero,
                         jnp.zeros((), jnp.int32))
  if not 0.0 < theta < 1.0:
    raise ValueError(f"auction theta must be in (0, 1), got {theta}")
  if loop not in ("while", "scan"):
    raise ValueError(f"auction loop must be 'while' or 'scan', got {loop!r}")
  cap = default_max_iters(k) if max_iters_per_phase is None else int(max_iters_per_phase)
  phases = num_phases(k, eps_start_frac, theta, tol_cert)

  span = jnp.max(a) - jnp.min(a)
  scale = jnp.maximum(1.0, span)
  eps_final = tol_cert * scale / (k + 1)
  eps_start = jnp.maximum(eps_start_frac * span, eps_final)
  rows = jnp.arange(k, dtype=jnp.int32)

  def bid_round(owner, prices, eps):
    assigned = jnp.any(owner[None, :] == rows[:, None], axis=1)
    values = a - prices[None, :]
    j1 = jnp.argmax(values, axis=1)
    first = rows[None, :] == j1[:, None]
    v2 = jnp.max(jnp.where(first, _NEG, values), axis=1)
    a_j1 = jnp.sum(jnp.where(first, a, 0.0), axis=1)
    bids = a_j1 - v2 + eps
    offers = jnp.where(first & ~assigned[:, None], bids[:, None], _NEG)
    best = jnp.max(offers, axis=0)
    winner = jnp.argmax(offers, axis=0).astype(jnp.int32)
    got = best > _NEG / 2
    return jnp.where(got, winner, owner), jnp.where(got, best, prices)

  def run_phase(prices, phase):
    eps = jnp.maximum(eps_start * theta ** phase.astype(jnp.float32), eps_final)
    owner0 = jnp.full((k,), -1, jnp.int32)
    if loop == "while":
      def cond(state):
        owner, _, it = state
        return jnp.any(owner < 0) & (it < cap)

      def body(state):
        owner, prices, it = state
        owner, prices = bid_round(owner, prices, eps)
        return owner, prices, it + 1

      owner, prices, it = jax.lax.while_loop(cond, body, (owner0, prices, jnp.zeros((), jnp.int32)))
    else:
      def body(state, _):
        owner, prices, it = state
        active = jnp.any(owner < 0)
        new_owner, new_prices = bid_round(owner, prices, eps)
        return (jnp.where(active, new_owner, owner), jnp.where(active, new_prices, prices),
                it + active.astype(jnp.int32)), None

      (owner, prices, it), _ = jax.lax.scan(body, (owner0, prices, jnp.zeros((), jnp.int32)), None,
                                            length=cap)
    return prices, (owner, it)

  prices, (owners, iters) = jax.lax.scan(run_phase, jnp.zeros((k,), jnp.float32),
                                         jnp.arange(phases, dtype=jnp.int32))
  owner = owners[-1]
  incomplete = jnp.any(owner < 0)
  assign = owner[None, :] == rows[:, None]            # assign[i, j]: row i owns column j
  perm = jnp.argmax(assign, axis=1).astype(jnp.int32)
  values = a - prices[None, :]
  slack = jnp.max(values, axis=1) - jnp.sum(jnp.where(assign, values, 0.0), axis=1)
  gap = jnp.where(incomplete, jnp.float32(1e30), jnp.sum(slack))
  needs_repair = incomplete | (gap > tol_cert * scale)
  return AuctionResult(perm, needs_repair, incomplete, gap, jnp.sum(iters))
