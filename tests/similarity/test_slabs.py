"""The element-major slab form (`slab_similarity`) against a brute-force numpy oracle and the block form."""

import itertools

import jax
import numpy as np
import pytest

from mmjax.similarity import (element_major, pairwise_set_similarity, slab_cosines, slab_similarity,
                              slab_supported)


def f(x, s):
    return x if s == 0 else np.expm1(s * x) / s


def oracle(c, row, col, kind, s_h=1.0, match_on="cos", topk_k=None):
    """One block c[K_V, K_T] (float64). maxmatch: over the permutations π of max(K_V, K_T) in lexicographic order,
    the first one maximising (#valid matched cells, Σ target); topk: mean of f over the k largest valid cells."""
    kv, kt = c.shape
    valid = row[:, None] & col[None, :]
    n_v, n_t = row.sum(), col.sum()
    if n_v == 0 or n_t == 0:
        return np.nan  # an empty set scores NaN, so the non-finite guards see it (mmjax.similarity)
    if kind == "maxmatch_topk":
        k = min(n_v, n_t) if topk_k is None else min(topk_k, kv * kt, n_v * n_t)
        top = np.sort(c[valid])[::-1][:k]
        return f(top, s_h).sum() / max(k, 1)
    target = c if match_on == "cos" else f(c, s_h)
    best = None
    for perm in itertools.permutations(range(max(kv, kt))):
        cells = [(i, j) for i, j in enumerate(perm) if i < kv and j < kt and valid[i, j]]
        key = (len(cells), sum(target[i, j] for i, j in cells))
        if best is None or key > best[0]:
            best = (key, sum(f(c[i, j], s_h) for i, j in cells))
    return best[1] / max(min(n_v, n_t), 1)


def oracle_pairs(a, b, am, bm, kind, **kw):
    am = np.ones(a.shape[:2], bool) if am is None else am
    bm = np.ones(b.shape[:2], bool) if bm is None else bm
    return np.array([[oracle(a[i].astype(np.float64) @ b[n].astype(np.float64).T, am[i], bm[n], kind, **kw)
                      for n in range(len(b))] for i in range(len(a))])


def slab_scores(a, b, kind, am=None, bm=None, **kw):
    with jax.default_matmul_precision("float32"):
        return np.asarray(jax.jit(lambda x, y, m1, m2: slab_similarity(slab_cosines(x, element_major(y)), kind,
                                                                        m1, m2, **kw))(a, b, am, bm))


def data(seed, kv, kt, ties, masked, ba=5, bb=7, d=6):
    rng = np.random.default_rng(seed)
    if ties:  # small integers: many exactly tied cells and tied assignments, all sums exact in float32
        a = rng.integers(-1, 2, size=(ba, kv, d)).astype(np.float32)
        b = rng.integers(-1, 2, size=(bb, kt, d)).astype(np.float32) / 4
    else:
        a = rng.normal(size=(ba, kv, d)).astype(np.float32)
        b = rng.normal(size=(bb, kt, d)).astype(np.float32)
        a /= np.linalg.norm(a, axis=-1, keepdims=True)
        b /= np.linalg.norm(b, axis=-1, keepdims=True)
    am = bm = None
    if masked:
        am = rng.random((ba, kv)) < 0.7
        bm = rng.random((bb, kt)) < 0.7
        am[0] = False  # an empty set scores NaN
    return a, b, am, bm


OPTIONS = [("maxmatch", {}), ("maxmatch", {"match_on": "transformed"}), ("maxmatch", {"s_h": 0.0}),
           ("maxmatch", {"s_h": 2.0, "solver": "enumerate"}), ("maxmatch_topk", {}), ("maxmatch_topk", {"topk_k": 3}),
           ("maxmatch_topk", {"s_h": 0.0})]


@pytest.mark.parametrize("kind,kw", OPTIONS)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 2), (1, 4)])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_slab_scores_equal_brute_force_and_block_form(kind, kw, shape, ties, masked):
    a, b, am, bm = data(hash((shape, ties, masked)) % 1000, *shape, ties, masked)
    got = slab_scores(a, b, kind, am, bm, **kw)
    ref = oracle_pairs(a, b, am, bm, kind, **{k: v for k, v in kw.items() if k != "solver"})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    with jax.default_matmul_precision("float32"):  # tied sets are small integers, not unit rows: no norm check
        block = np.asarray(pairwise_set_similarity(a, b, kind, am, bm, normalize=None, **kw))
    np.testing.assert_allclose(got, block, rtol=1e-5, atol=1e-5)


def test_ties_with_different_f_sums_follow_the_first_assignment():
    """Two optimal assignments with equal raw totals but different f-sums: the lexicographically first wins."""
    # C = [[0.5, 1.0], [0.0, 0.5]]: identity total 1.0 (f-sum 2·expm1(0.5)), swap total 1.0 (f-sum expm1(1)).
    a = np.array([[[1, 0], [0, 1]]], np.float32)
    b = np.array([[[0.5, 0.0], [1.0, 0.5]]], np.float32)
    got = slab_scores(a, b, "maxmatch")
    np.testing.assert_allclose(got, [[np.expm1(0.5)]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(pairwise_set_similarity(a, b, "maxmatch", normalize=None)), got, rtol=1e-6)


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk"])
def test_nan_valid_cell_is_nan_and_masked_nan_is_ignored(kind):
    a, b, _, _ = data(3, 4, 4, False, False)
    am = np.ones(a.shape[:2], bool)
    clean = slab_scores(a, b, kind, am, None)
    a[1, 0, 0] = np.nan  # valid
    a[2, 3, 1], am[2, 3] = np.nan, False  # masked
    clean_masked = slab_scores(np.where(np.isnan(a), 0, a), b, kind, am, None)
    got = slab_scores(a, b, kind, am, None)
    assert np.all(np.isnan(got[1])) and not np.any(np.isnan(np.delete(got, 1, 0)))
    np.testing.assert_allclose(np.delete(got, 1, 0), np.delete(clean_masked, 1, 0), rtol=1e-6)
    np.testing.assert_allclose(got[[0, 3, 4]], clean[[0, 3, 4]], rtol=1e-6)
    unmasked = slab_scores(a, b, kind)  # no masks at all: the NaN row is still NaN
    assert np.all(np.isnan(unmasked[[1, 2]])) and not np.any(np.isnan(unmasked[[0, 3, 4]]))


def test_supported_options_and_refusal():
    assert slab_supported("maxmatch", 4, 4) and slab_supported("maxmatch_topk", 9, 9)
    assert not slab_supported("maxmatch", 6, 6)  # 720 permutations: the block form with a solver
    assert not slab_supported("maxmatch", 4, 4, solver="hungarian")  # its tie-breaking is not mirrored
    assert not slab_supported("maxmatch", 4, 4, solver_options={"pad_penalty": 5.0})
    assert not slab_supported("chamfer", 4, 4)
    a, b, _, _ = data(4, 4, 4, False, False)
    with pytest.raises(ValueError, match="does not cover kind='chamfer'"):
        slab_similarity(slab_cosines(a, element_major(b)), "chamfer")
