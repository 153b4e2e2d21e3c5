"""Masked / padded / rectangular blocks, NaN handling and bad input."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax import matching

EXACT = ["enumerate", "auction", "hungarian"]


def masked_optimum(c, row_mask, col_mask):
    sub = c[np.ix_(np.flatnonzero(row_mask), np.flatnonzero(col_mask))].astype(np.float64)
    r, cc = linear_sum_assignment(sub, maximize=True)
    return sub[r, cc].sum(), len(r)


@pytest.mark.parametrize("method", EXACT)
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_every_mask_size_gives_max_cardinality_optimum(method, k):
    rng = np.random.default_rng(k)
    cases = [(nv, nt) for nv in range(1, k + 1) for nt in range(1, k + 1)]
    c = rng.uniform(-1, 1, size=(len(cases), k, k)).astype(np.float32)
    c[:, :, :] += rng.uniform(-50, 50, size=c.shape).astype(np.float32) * 0  # cosine range
    row_mask = np.zeros((len(cases), k), bool)
    col_mask = np.zeros((len(cases), k), bool)
    for b, (nv, nt) in enumerate(cases):
        row_mask[b, rng.permutation(k)[:nv]] = True
        col_mask[b, rng.permutation(k)[:nt]] = True
    # Padded entries hold junk that must not matter.
    c = np.where(row_mask[:, :, None] & col_mask[:, None, :], c, 5.0).astype(np.float32)
    cols = np.asarray(jax.jit(lambda x, r, q: matching.solve(x, method, (r, q)))(c, row_mask, col_mask))
    for b in range(len(cases)):
        want, m = masked_optimum(c[b], row_mask[b], col_mask[b])
        matched = [(i, j) for i, j in enumerate(cols[b]) if j >= 0]
        assert len(matched) == m, "maximum cardinality"
        assert all(row_mask[b, i] and col_mask[b, j] for i, j in matched), "padded element matched"
        assert len({j for _, j in matched}) == m
        np.testing.assert_allclose(sum(c[b, i, j] for i, j in matched), want, atol=1e-5)


@pytest.mark.parametrize("method", EXACT)
@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (1, 4), (4, 1), (2, 7)])
def test_rectangular_blocks(method, shape):
    n, m = shape
    rng = np.random.default_rng(n * 10 + m)
    a = rng.normal(size=(16, n, m)).astype(np.float32)
    cols = np.asarray(matching.solve(a, method))
    assert cols.shape == (16, n)
    for b in range(16):
        r, cc = linear_sum_assignment(a[b].astype(np.float64), maximize=True)
        matched = [(i, j) for i, j in enumerate(cols[b]) if j >= 0]
        assert len(matched) == min(n, m)
        assert len({j for _, j in matched}) == len(matched)
        np.testing.assert_allclose(sum(a[b, i, j] for i, j in matched), a[b][r, cc].sum(), atol=1e-5)


def test_cell_mask_is_respected():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(10, 4, 4)).astype(np.float32)
    cell = np.ones((10, 4, 4), bool)
    cell[:, 0, 0] = False
    cols = np.asarray(matching.solve(a + 100 * (np.arange(4)[:, None] == np.arange(4)), "hungarian", cell))
    assert np.all(cols[:, 0] != 0)


def test_nan_eager_raises_and_jit_reports():
    a = np.random.default_rng(0).normal(size=(4, 3, 3)).astype(np.float32)
    a[2, 1, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        matching.solve(a, "hungarian")
    cols, aux = jax.jit(lambda x: matching.solve_with_aux(x, "auction"))(a)
    assert float(aux["nonfinite_frac"]) == pytest.approx(0.25)
    assert np.all(np.asarray(cols[2]) == -1)
    assert np.all(np.asarray(cols)[[0, 1, 3]] >= 0)


@pytest.mark.parametrize("method", ["enumerate", "hungarian", "auction"])
def test_nan_in_masked_cell_is_ignored_eager_and_jit_alike(method):
    a = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32)
    a[2, 2], a[0, 2] = np.nan, np.inf  # both in masked cells (row 2 / column 2 are padding)
    row = np.array([True, True, False]); col = np.array([True, True, False])
    jitted = jax.jit(lambda x: matching.solve_with_aux(x, method, (row, col)))(a)
    eager = matching.solve_with_aux(a, method, (row, col))  # before: eager raised on the masked NaN
    for cols, aux in (jitted, eager):
        assert float(aux["nonfinite_frac"]) == 0.0
        assert sorted(np.asarray(cols)[:2].tolist()) == [0, 1]
    np.testing.assert_array_equal(np.asarray(jitted[0]), np.asarray(eager[0]))
    a[1, 0] = np.nan  # a valid cell: eager refuses, jit reports
    with pytest.raises(ValueError, match="non-finite values in valid cells"):
        matching.solve(a, method, (row, col))


@pytest.mark.parametrize("bad, match", [
    (np.zeros((4,), np.float32), "scores must have shape"),
    (np.zeros((2, 0, 3), np.float32), "non-empty"),
])
def test_bad_scores(bad, match):
    with pytest.raises(ValueError, match=match):
        matching.solve(bad)


def test_bad_masks_and_method():
    a = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="row_mask"):
        matching.solve(a, "hungarian", (np.ones((2, 4), bool), np.ones((2, 4), bool)))
    with pytest.raises(ValueError, match="cell mask"):
        matching.solve(a, "hungarian", np.ones((2, 4, 3), bool))
    with pytest.raises(ValueError, match="unknown matching method"):
        matching.solve(a, "greedy")
    with pytest.raises(ValueError, match="K <= 8"):
        matching.solve(np.zeros((9, 9), np.float32), "enumerate")
