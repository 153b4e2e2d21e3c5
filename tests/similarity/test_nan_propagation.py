"""NaN handling of every similarity kind: a NaN in a valid cell makes the pair NaN, a NaN in a padding (masked)
element changes nothing — eagerly and under jit alike."""

import jax
import numpy as np
import pytest

from mmjax.similarity import KINDS, pairwise_set_similarity

MASKABLE = [k for k in KINDS if k != "sinkhorn_soft"]  # sinkhorn_soft takes square unmasked blocks only


def _sets(seed, ba=3, bb=4, k=4, d=8):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(ba, k, d)).astype(np.float32)
    b = rng.normal(size=(bb, k, d)).astype(np.float32)
    return a / np.linalg.norm(a, axis=-1, keepdims=True), b / np.linalg.norm(b, axis=-1, keepdims=True)


def _both(kind, *args):
    eager = np.asarray(pairwise_set_similarity(*args[:2], kind, *args[2:]))
    jitted = np.asarray(jax.jit(lambda *x: pairwise_set_similarity(*x[:2], kind, *x[2:]))(*args))
    return eager, jitted


@pytest.mark.parametrize("kind", KINDS)
def test_nan_in_valid_element_gives_nan_for_that_row_and_column_only(kind):
    a, b = _sets(0)
    clean = np.asarray(pairwise_set_similarity(a, b, kind))
    a[1, 2, 3] = np.nan  # image set 1 → every pair (1, n) is NaN
    b[2, 0, 0] = np.nan  # caption set 2 → every pair (i, 2) is NaN
    want_nan = np.zeros(clean.shape, bool)
    want_nan[1, :] = want_nan[:, 2] = True
    with jax.default_matmul_precision("float32"):
        for got in _both(kind, a, b):
            np.testing.assert_array_equal(np.isnan(got), want_nan)
            np.testing.assert_allclose(got[~want_nan], clean[~want_nan], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", MASKABLE)
def test_nan_in_masked_element_changes_nothing(kind):
    a, b = _sets(1, k=5)
    a_mask = np.ones(a.shape[:2], bool)
    b_mask = np.ones(b.shape[:2], bool)
    a_mask[0, 4] = a_mask[2, 1] = False
    b_mask[1, 0] = b_mask[3, 3] = False
    with jax.default_matmul_precision("float32"):
        clean = np.asarray(pairwise_set_similarity(a, b, kind, a_mask, b_mask))
        a[0, 4], a[2, 1] = np.nan, np.inf
        b[1, 0], b[3, 3] = np.nan, -np.inf
        for got in _both(kind, a, b, a_mask, b_mask):
            assert np.all(np.isfinite(got)), got
            np.testing.assert_allclose(got, clean, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk"])
def test_nan_in_one_valid_cell_of_a_masked_block(kind):
    """Masks present and the NaN sits in a valid element: still NaN (the solver must not leave it unmatched = 0)."""
    a, b = _sets(2)
    a_mask = np.ones(a.shape[:2], bool)
    a_mask[:, 3] = False
    b[0, 1, :] = np.nan
    for got in _both(kind, a, b, a_mask, np.ones(b.shape[:2], bool)):
        assert np.all(np.isnan(got[:, 0])) and np.all(np.isfinite(got[:, 1:]))
