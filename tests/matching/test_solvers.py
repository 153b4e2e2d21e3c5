"""Exact solvers against scipy's linear_sum_assignment and brute force (maximisation)."""

import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax import matching

EXACT = ["enumerate", "auction", "hungarian"]
# One jitted function per method, so every block shape compiles once across the parametrised kinds.
JITTED = {m: jax.jit(functools.partial(matching.solve, method=m)) for m in EXACT}
SIZES = [1, 2, 3, 4, 5, 8, 16, 32]


def make_blocks(kind, k, n, seed):
    rng = np.random.default_rng(seed)
    if kind == "normal":
        a = rng.normal(size=(n, k, k))
    elif kind == "cosine":
        v = rng.normal(size=(n, k, 16)); t = rng.normal(size=(n, k, 16))
        v /= np.linalg.norm(v, axis=-1, keepdims=True); t /= np.linalg.norm(t, axis=-1, keepdims=True)
        a = np.einsum("bid,bjd->bij", v, t)
    elif kind == "int_ties":
        a = rng.integers(0, 3, size=(n, k, k))
    elif kind == "all_equal":
        a = np.full((n, k, k), 0.3)
    elif kind == "duplicate_rows":
        a = rng.normal(size=(n, k, k)); a[:, -1] = a[:, 0]; a[:, :, -1] = a[:, :, 0]
    elif kind == "rank1":
        a = rng.normal(size=(n, k, 1)) * rng.normal(size=(n, 1, k))
    elif kind == "large":
        a = rng.integers(-10_000, 10_001, size=(n, k, k)).astype(np.float64)
    else:
        raise AssertionError(kind)
    return a.astype(np.float32)


def scipy_totals(a):
    a64 = a.astype(np.float64)
    return np.array([a64[b][linear_sum_assignment(a64[b], maximize=True)].sum() for b in range(len(a))])


def totals_of(a, cols):
    a64 = a.astype(np.float64)
    rows = np.arange(a.shape[1])
    return np.array([a64[b, rows, cols[b]].sum() for b in range(len(a))])


def assert_permutations(cols, k):
    assert cols.dtype == np.int32
    assert np.all(np.sort(cols, axis=-1) == np.arange(k)), "not a permutation"


@pytest.mark.parametrize("method", EXACT)
@pytest.mark.parametrize("k", SIZES)
@pytest.mark.parametrize("kind", ["normal", "cosine", "int_ties", "all_equal", "duplicate_rows", "rank1", "large"])
def test_exact_solvers_match_scipy(method, k, kind):
    if method == "enumerate" and k > 8:
        pytest.skip("enumerate is limited to K <= 8")
    n = 48 if k <= 8 else 16
    a = make_blocks(kind, k, n, seed=k)
    cols = np.asarray(JITTED[method](a))
    assert_permutations(cols, k)
    want = scipy_totals(a)
    got = totals_of(a, cols)
    span = max(1.0, float(a.max() - a.min()))
    if kind in ("int_ties", "large"):
        np.testing.assert_array_equal(got, want)  # integer benefits: exactly optimal
    else:
        np.testing.assert_allclose(got, want, atol=1e-5 * span)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_brute_force_oracle_agrees(k):
    a = make_blocks("normal", k, 20, seed=100 + k)
    brute = np.array([max(sum(float(x[i, p[i]]) for i in range(k)) for p in itertools.permutations(range(k)))
                      for x in a.astype(np.float64)])
    for method in EXACT:
        got = totals_of(a, np.asarray(matching.solve(a, method)))
        np.testing.assert_allclose(got, brute, atol=1e-5)


@pytest.mark.parametrize("method", EXACT)
def test_eager_jit_vmap_agree(method):
    a = make_blocks("cosine", 4, 32, seed=7)
    eager = totals_of(a, np.asarray(matching.solve(a, method)))
    jitted = totals_of(a, np.asarray(jax.jit(lambda x: matching.solve(x, method))(a)))
    vmapped = totals_of(a, np.asarray(jax.vmap(lambda x: matching.solve(x, method))(a)))
    jit_vmap = totals_of(a, np.asarray(jax.jit(jax.vmap(lambda x: matching.solve(x, method)))(a)))
    for other in (jitted, vmapped, jit_vmap):
        np.testing.assert_allclose(other, eager, atol=1e-6)


def test_leading_batch_dims_and_single_problem():
    a = make_blocks("normal", 4, 6, seed=3)
    cols = matching.solve(a.reshape(2, 3, 4, 4), "auction")
    assert cols.shape == (2, 3, 4)
    np.testing.assert_allclose(totals_of(a, np.asarray(cols).reshape(6, 4)), scipy_totals(a), atol=1e-5)
    single = matching.solve(a[0], "hungarian")
    assert single.shape == (4,)


def test_jitted_batch_solver_traces_once():
    @jax.jit
    @chex.assert_max_traces(n=1)
    def solve_batch(x):
        return matching.solve(x, "auction")

    for seed in range(3):
        solve_batch(make_blocks("cosine", 4, 16, seed))


def test_auto_resolves_by_table():
    assert matching.choose_auto(4, "cpu") == "enumerate"
    assert matching.choose_auto(5, "cpu") == "enumerate"
    assert matching.choose_auto(6, "cpu") == "hungarian"
    a = make_blocks("normal", 6, 8, seed=0)
    np.testing.assert_allclose(totals_of(a, np.asarray(matching.solve(a))), scipy_totals(a), atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_unmasked_enumerate_fast_path_equals_general_path(k):
    """mask=None square blocks take the one-GEMM path; an all-true mask forces the general masked path."""
    a = np.concatenate([make_blocks("int_ties", k, 40, k), make_blocks("cosine", k, 40, k)]).astype(np.float32)
    a = a.reshape(2, 40, k, k)
    a[0, 3, 0, 0], a[1, 7, k - 1, 0] = np.nan, -np.inf      # two non-finite blocks: unmatched, total 0
    ones = (np.ones((2, 40, k), bool), np.ones((2, 40, k), bool))
    fast = jax.jit(lambda x: matching.solve_with_aux(x, "enumerate"))(a)
    general = jax.jit(lambda x: matching.solve_with_aux(x, "enumerate", ones))(a)
    np.testing.assert_array_equal(np.asarray(fast[0]), np.asarray(general[0]))
    np.testing.assert_allclose(np.asarray(fast[1]["total"]), np.asarray(general[1]["total"]), rtol=1e-6, atol=1e-6)
    assert float(fast[1]["nonfinite_frac"]) == pytest.approx(2 / 80)
    cols = np.asarray(fast[0]).reshape(-1, k)
    for i, block in enumerate(a.reshape(-1, k, k)):
        if not np.isfinite(block).all():
            assert (cols[i] == -1).all()
            continue
        ref = linear_sum_assignment(block, maximize=True)[1]
        assert block[np.arange(k), cols[i]].sum() == pytest.approx(block[np.arange(k), ref].sum(), abs=1e-5)
