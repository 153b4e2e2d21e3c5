"""Auction-specific guarantees: certificate, repair, caps, loop variants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax import matching
from mmjax.matching import solve_auction


def opt_total(a):
  a = np.asarray(a, np.float64)
  return a[linear_sum_assignment(a, maximize=True)].sum()


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_certificate_bounds_true_gap(k):
  rng = np.random.default_rng(k)
  a = rng.normal(size=(64, k, k)).astype(np.float32)
  res = jax.jit(jax.vmap(solve_auction))(a)
  for b in range(64):
    total = a[b].astype(np.float64)[np.arange(k), np.asarray(res.perm[b])].sum()
    true_gap = opt_total(a[b]) - total
    assert true_gap >= -1e-5
    if not bool(res.needs_repair[b]):
      # Weak duality: the certified gap bounds the true gap (up to float32 rounding).
      assert true_gap <= float(res.gap[b]) + 1e-5


@pytest.mark.parametrize("loop", ["while", "scan"])
def test_tiny_iteration_cap_triggers_repair_and_stays_exact(loop):
  rng = np.random.default_rng(0)
  a = rng.normal(size=(40, 8, 8)).astype(np.float32)
  cols, aux = jax.jit(lambda x: matching.solve_with_aux(
      x, "auction", auction=dict(max_iters_per_phase=1, loop=loop)))(a)
  assert float(aux["incomplete_frac"]) > 0.2  # the cap really bit
  assert float(aux["repaired_frac"]) >= float(aux["incomplete_frac"])
  got = np.array([a[b].astype(np.float64)[np.arange(8), np.asarray(cols[b])].sum() for b in range(40)])
  want = np.array([opt_total(x) for x in a])
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_repair_buffer_overflow_falls_back_to_whole_batch():
  rng = np.random.default_rng(1)
  a = rng.normal(size=(200, 6, 6)).astype(np.float32)  # capacity = max(8, 2) = 8 < failures
  cols, aux = matching.solve_with_aux(a, "auction", auction=dict(max_iters_per_phase=1))
  assert float(aux["repaired_frac"]) * 200 > 8
  got = np.array([a[b].astype(np.float64)[np.arange(6), np.asarray(cols[b])].sum() for b in range(200)])
  np.testing.assert_allclose(got, [opt_total(x) for x in a], atol=1e-5)


def test_scan_and_while_loops_agree():
  rng = np.random.default_rng(2)
  a = rng.normal(size=(32, 5, 5)).astype(np.float32)
  w = matching.solve(a, "auction", auction=dict(loop="while"))
  s = matching.solve(a, "auction", auction=dict(loop="scan"))
  tw = [a[b][np.arange(5), np.asarray(w[b])].sum() for b in range(32)]
  ts = [a[b][np.arange(5), np.asarray(s[b])].sum() for b in range(32)]
  np.testing.assert_allclose(tw, ts, atol=1e-5)


def test_outputs_finite_and_integer():
  a = np.random.default_rng(3).integers(0, 3, size=(64, 8, 8)).astype(np.float32)
  res = jax.vmap(solve_auction)(a)
  assert res.perm.dtype == jnp.int32
  assert np.all(np.isfinite(np.asarray(res.gap)))
  cols, aux = matching.solve_with_aux(a, "auction")
  for v in aux.values():
    assert np.all(np.isfinite(np.asarray(v)))
