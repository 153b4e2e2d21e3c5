"""Compaction, chunking, warm start and integer ε of the batched auction: exactness against scipy / brute force."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax import matching
from mmjax.matching import solve_auction
from mmjax.matching.compaction import compacting_while, stage_capacities


def scipy_totals(a):
    a = np.asarray(a, np.float64)
    return np.array([x[linear_sum_assignment(x, maximize=True)].sum() for x in a])


def totals(a, cols):
    a = np.asarray(a, np.float64)
    return a[np.arange(len(a))[:, None], np.arange(a.shape[1])[None, :], np.asarray(cols)].sum(-1)


def blocks(kind, k, n, seed):
    rng = np.random.default_rng(seed)
    if kind == "cosine":
        v = rng.normal(size=(n, k, 16)); t = rng.normal(size=(n, k, 16))
        v /= np.linalg.norm(v, axis=-1, keepdims=True); t /= np.linalg.norm(t, axis=-1, keepdims=True)
        return np.einsum("bid,bjd->bij", v, t).astype(np.float32)
    return rng.integers(0, 3, size=(n, k, k)).astype(np.float32)


# --- compacting_while: the generic loop against a plain per-problem loop -----------------------------------


def test_stage_capacities_shrink_and_stop():
    assert stage_capacities(5120, 4.0, 64) == (1280, 320, 80)
    assert stage_capacities(100, 4.0, 64) == ()
    assert stage_capacities(5120, 0.0, 64) == ()
    assert stage_capacities(1000, 2.0, 100) == (500, 250, 125)


def test_compacting_while_matches_plain_loop_and_counts_trips():
    # Each problem counts up to its own target; the result must equal a numpy loop, whatever the stages.
    rng = np.random.default_rng(0)
    target = rng.integers(0, 60, size=400).astype(np.int32)
    target[7] = 200                                                     # one long tail

    def body(c, s):
        x, done = s
        x = jnp.where(done, x, x + 1)
        return x, done | (x >= c)

    state = (jnp.zeros(400, jnp.int32), jnp.asarray(target == 0))
    for caps in [(), (100, 25), stage_capacities(400, 2.0, 8)]:
        (x, done), trips = jax.jit(lambda c, s, caps=caps: compacting_while(body, lambda s: s[1], c, s, caps))(
            jnp.asarray(target), state)
        np.testing.assert_array_equal(np.asarray(x), target)
        assert bool(np.all(done))
        assert int(np.sum(trips)) == 200                                # the critical path is the slowest problem
        if caps:
            assert int(trips[0]) < 200                                  # the full buffer stopped early


def test_compacting_while_rejects_bad_capacities():
    with pytest.raises(ValueError, match="strictly decreasing"):
        compacting_while(lambda c, s: s, lambda s: s, None, jnp.zeros(10, bool), (4, 6))


# --- the auction with its speed-ups, against scipy -------------------------------------------------------


@pytest.mark.parametrize("kind", ["cosine", "int_ties"])
@pytest.mark.parametrize("k", [2, 3, 4, 8, 16, 32])
def test_auction_defaults_exact_after_repair(kind, k):
    n = 96 if k <= 8 else 24
    a = blocks(kind, k, n, seed=k)
    cols = jax.jit(lambda x: matching.solve(x, "auction"))(a)
    got, want = totals(a, cols), scipy_totals(a)
    if kind == "int_ties":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_auction_matches_brute_force(k):
    a = blocks("cosine", k, 40, seed=50 + k)
    brute = [max(sum(float(x[i, p[i]]) for i in range(k)) for p in itertools.permutations(range(k)))
             for x in a.astype(np.float64)]
    np.testing.assert_allclose(totals(a, matching.solve(a, "auction")), brute, atol=1e-5)


def test_chunked_compacted_and_plain_runs_agree_on_certified_problems():
    # 300 problems in chunks of 64 (padding to 320) and with compaction, vs one chunk without compaction.
    a = blocks("cosine", 8, 300, seed=1)
    want = scipy_totals(a)
    for opts in [dict(chunk_elems=64 * 64, min_buffer=8), dict(chunk_elems=None, compaction=0.0),
                 dict(chunk_elems=None, compaction=2.0, min_buffer=4)]:
        res = jax.jit(lambda x, o=opts: solve_auction(x, **o))(a)
        assert res.perm.shape == (300, 8)
        ok = ~np.asarray(res.needs_repair)
        assert ok.mean() > 0.95
        np.testing.assert_allclose(totals(a, res.perm)[ok], want[ok], atol=1e-5)


@pytest.mark.parametrize("warm_start", ["none", "dual"])
@pytest.mark.parametrize("integer_eps", [False, True])
def test_warm_start_and_integer_eps_keep_certified_problems_optimal(warm_start, integer_eps):
    a = blocks("int_ties", 8, 128, seed=2)
    res = solve_auction(a, warm_start=warm_start, integer_eps=integer_eps)
    ok = ~np.asarray(res.needs_repair)
    # Without both speed-ups some tie-heavy problems exhaust the per-phase cap (flagged, repaired by solve()).
    assert ok.mean() > (0.95 if warm_start == "dual" else 0.8)
    np.testing.assert_array_equal(totals(a, res.perm)[ok], scipy_totals(a)[ok])


def test_integer_eps_needs_fewer_rounds_on_integer_blocks():
    # The point of integer_eps: integer problems stop at ε = 1/(K+1) instead of the relative 1e-3 floor.
    a = blocks("int_ties", 8, 128, seed=3)
    fine = solve_auction(a, integer_eps=False, warm_start="none", eps_start_frac=0.25, theta=0.25)
    coarse = solve_auction(a, integer_eps=True, warm_start="none", eps_start_frac=0.25, theta=0.25)
    assert float(np.mean(coarse.iterations)) < float(np.mean(fine.iterations))


def test_rectangular_and_masked_blocks_exact():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(64, 5, 9)).astype(np.float32)
    row = rng.random((64, 5)) < 0.8
    col = rng.random((64, 9)) < 0.8
    cols = np.asarray(jax.jit(lambda x, r, c: matching.solve(x, "auction", mask=(r, c)))(a, row, col))
    for b in range(64):
        rows_v, cols_v = np.flatnonzero(row[b]), np.flatnonzero(col[b])
        sub = a[b][np.ix_(rows_v, cols_v)].astype(np.float64)
        want = sub[linear_sum_assignment(sub, maximize=True)].sum() if sub.size else 0.0
        matched = [(i, cols[b, i]) for i in range(5) if cols[b, i] >= 0]
        assert len(matched) == min(len(rows_v), len(cols_v))
        assert all(row[b, i] and col[b, j] for i, j in matched)
        np.testing.assert_allclose(sum(float(a[b, i, j]) for i, j in matched), want, atol=1e-5)


def test_vmapped_solve_agrees_with_batched():
    a = blocks("cosine", 6, 32, seed=5)
    batched = totals(a, matching.solve(a, "auction"))
    vmapped = totals(a, jax.jit(jax.vmap(lambda x: matching.solve(x, "auction")))(a))
    np.testing.assert_allclose(vmapped, batched, atol=1e-6)
    np.testing.assert_allclose(batched, scipy_totals(a), atol=1e-5)


def test_bad_warm_start_is_rejected():
    with pytest.raises(ValueError, match="warm_start"):
        solve_auction(np.zeros((2, 3, 3), np.float32), warm_start="greedy")


def test_auto_uses_the_auction_where_the_table_says_and_stays_exact():
    assert matching.choose_auto(16, "cpu") == "auction"
    assert matching.choose_auto(8, "cpu") == "hungarian"
    assert matching.choose_auto(16, "gpu") == "auction" and matching.choose_auto(16, "tpu") == "auction"
    a = blocks("cosine", 16, 16, seed=6)
    np.testing.assert_allclose(totals(a, matching.solve(a, backend="cpu")), scipy_totals(a), atol=1e-5)
