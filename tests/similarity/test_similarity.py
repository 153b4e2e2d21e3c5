"""Set similarities against plain numpy references, plus their invariances (element order, padding, limits)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.similarity import KINDS, block_similarity, inference_kind, pairwise_set_similarity, reported_kinds


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def sets(seed, ba=4, bb=6, kv=4, kt=4, d=8):
    rng = np.random.default_rng(seed)
    return (unit(rng.normal(size=(ba, kv, d))).astype(np.float32),
            unit(rng.normal(size=(bb, kt, d))).astype(np.float32))


def f(x, s=1.0):
    return x if s == 0 else np.expm1(s * x) / s


# ---- plain numpy references (float64), one block at a time -------------------------------------------------
def ref_block(c, kind, alpha=16.0, s_h=1.0):
    c = np.asarray(c, np.float64)
    kv, kt = c.shape
    if kind == "mil":
        return c.max()
    if kind == "average":
        return c.mean()
    if kind == "average_sigmoid":
        return (1 / (1 + np.exp(-c))).mean()
    if kind == "chamfer":
        return 0.5 * (c.max(1).mean() + c.max(0).mean())
    if kind == "smooth_chamfer":
        lse = lambda x, ax: np.log(np.exp(alpha * x).sum(ax))
        return 0.5 * (lse(c, 1).mean() / alpha + lse(c, 0).mean() / alpha)
    if kind == "maxmatch":
        best = None
        if kv <= kt:
            for cols in itertools.permutations(range(kt), kv):
                raw = sum(c[i, j] for i, j in enumerate(cols))
                if best is None or raw > best[0] + 1e-12:
                    best = (raw, [f(c[i, j], s_h) for i, j in enumerate(cols)])
        else:
            for rows in itertools.permutations(range(kv), kt):
                raw = sum(c[i, j] for j, i in enumerate(rows))
                if best is None or raw > best[0] + 1e-12:
                    best = (raw, [f(c[i, j], s_h) for j, i in enumerate(rows)])
        return np.mean(best[1])
    if kind == "maxmatch_topk":
        m = min(kv, kt)
        return np.mean(f(np.sort(c.ravel())[::-1][:m], s_h))
    raise AssertionError(kind)


def ref_pairwise(a, b, kind, a_mask=None, b_mask=None, **kw):
    out = np.zeros((len(a), len(b)))
    for i in range(len(a)):
        for n in range(len(b)):
            x = a[i] if a_mask is None else a[i][a_mask[i]]
            y = b[n] if b_mask is None else b[n][b_mask[n]]
            out[i, n] = ref_block(x.astype(np.float64) @ y.astype(np.float64).T, kind, **kw)
    return out


DETERMINISTIC = [k for k in KINDS if k != "sinkhorn_soft"]


@pytest.mark.parametrize("kind", DETERMINISTIC)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 2), (1, 4)])
def test_kinds_match_numpy_reference(kind, shape):
    a, b = sets(1, kv=shape[0], kt=shape[1])
    got = np.asarray(pairwise_set_similarity(a, b, kind))
    np.testing.assert_allclose(got, ref_pairwise(a, b, kind), atol=2e-5)


@pytest.mark.parametrize("kind", DETERMINISTIC)
def test_masks_equal_dropping_elements(kind):
    a, b = sets(2, kv=5, kt=4)
    rng = np.random.default_rng(0)
    a_mask = rng.random((4, 5)) < 0.7; a_mask[:, 0] = True
    b_mask = rng.random((6, 4)) < 0.7; b_mask[:, 1] = True
    got = np.asarray(pairwise_set_similarity(a, b, kind, a_mask, b_mask))
    np.testing.assert_allclose(got, ref_pairwise(a, b, kind, a_mask, b_mask), atol=2e-5)


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk", "chamfer", "smooth_chamfer", "mil"])
def test_appending_padded_elements_changes_nothing(kind):
    a, b = sets(3)
    rng = np.random.default_rng(1)
    a_pad = np.concatenate([a, unit(rng.normal(size=(4, 2, 8))).astype(np.float32)], 1)
    b_pad = np.concatenate([b, unit(rng.normal(size=(6, 1, 8))).astype(np.float32)], 1)
    a_mask = np.arange(6)[None].repeat(4, 0) < 4
    b_mask = np.arange(5)[None].repeat(6, 0) < 4
    plain = lambda x, y: jnp.sum(pairwise_set_similarity(x, y, kind) * jnp.arange(24.).reshape(4, 6))
    padded = lambda x, y: jnp.sum(pairwise_set_similarity(x, y, kind, a_mask, b_mask) * jnp.arange(24.).reshape(4, 6))
    np.testing.assert_allclose(padded(a_pad, b_pad), plain(a, b), rtol=1e-5)
    ga, gb = jax.grad(plain, (0, 1))(a, b)
    gpa, gpb = jax.grad(padded, (0, 1))(a_pad, b_pad)
    np.testing.assert_allclose(gpa[:, :4], ga, atol=1e-5)
    np.testing.assert_allclose(gpb[:, :4], gb, atol=1e-5)
    assert np.all(np.asarray(gpa[:, 4:]) == 0) and np.all(np.asarray(gpb[:, 4:]) == 0)


def test_maxmatch_invariant_to_element_permutations():
    a, b = sets(4)
    base = np.asarray(pairwise_set_similarity(a, b, "maxmatch"))
    rng = np.random.default_rng(0)
    for _ in range(3):
        pa = a[:, rng.permutation(4)]
        pb = b[:, rng.permutation(4)]
        for x, y in ((pa, b), (a, pb), (pa, pb)):
            np.testing.assert_allclose(pairwise_set_similarity(x, y, "maxmatch"), base, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_matching_maximises_raw_cosine_sum(k):
    """Σ_k C[k, π*(k)] ≥ Σ_k C[k, σ(k)] for every σ (exhaustive); match_on='cos' optimises the raw sum."""
    from mmjax import matching
    a, b = sets(5, ba=3, bb=3, kv=k, kt=k)
    c = np.einsum("ikd,njd->inkj", a, b).astype(np.float64)
    cols = np.asarray(matching.solve(c.astype(np.float32), "auto"))
    for i in range(3):
        for n in range(3):
            raw = c[i, n][np.arange(k), cols[i, n]].sum()
            for sigma in itertools.permutations(range(k)):
                assert raw >= c[i, n][np.arange(k), list(sigma)].sum() - 1e-6


@pytest.mark.parametrize("setting", [dict(match_on="transformed", s_h=1.0), dict(match_on="cos", s_h=0.0)])
def test_transformed_or_linear_maxmatch_dominates_every_fixed_permutation(setting):
    a, b = sets(6, kv=4, kt=4)
    s = np.asarray(pairwise_set_similarity(a, b, "maxmatch", **setting))
    c = np.einsum("ikd,njd->inkj", a, b).astype(np.float64)
    for sigma in itertools.permutations(range(4)):
        fixed = f(c[..., np.arange(4), list(sigma)], setting["s_h"]).mean(-1)
        assert np.all(s >= fixed - 1e-5)


def test_counter_example_cos_matching_is_not_f_optimal():
    """With match_on='cos', s_h>0, S_H is not the max over permutations of the f-score."""
    c = jnp.array([[0.5, 1.0], [-0.05, 0.5]], jnp.float32)
    s_cos = float(block_similarity(c, "maxmatch"))
    s_tr = float(block_similarity(c, "maxmatch", match_on="transformed"))
    np.testing.assert_allclose(s_cos, (np.expm1(0.5) * 2) / 2, rtol=1e-6)   # identity wins on raw sum
    np.testing.assert_allclose(s_tr, (np.expm1(1.0) + np.expm1(-0.05)) / 2, rtol=1e-6)
    assert s_tr > s_cos


def test_bounds_topk_and_rowmax():
    a, b = sets(7)
    s = np.asarray(pairwise_set_similarity(a, b, "maxmatch"))
    topk = np.asarray(pairwise_set_similarity(a, b, "maxmatch_topk"))
    c = np.einsum("ikd,njd->inkj", a, b).astype(np.float64)
    assert np.all(topk >= s - 1e-6)
    assert np.all(s <= np.expm1(c.max(-1)).mean(-1) + 1e-6)  # ≤ mean over rows of exp(row max) − 1


def test_k1_and_small_s_limits():
    a, b = sets(8, kv=1, kt=1)
    c = np.einsum("id,nd->in", a[:, 0], b[:, 0])
    np.testing.assert_allclose(pairwise_set_similarity(a, b, "maxmatch"), np.expm1(c), atol=1e-6)
    a, b = sets(9)
    lin = np.asarray(pairwise_set_similarity(a, b, "maxmatch", s_h=0.0))
    small = np.asarray(pairwise_set_similarity(a, b, "maxmatch", s_h=1e-4))
    np.testing.assert_allclose(small, lin, atol=1e-4)


def test_smooth_chamfer_tends_to_chamfer():
    a, b = sets(10)
    cham = np.asarray(pairwise_set_similarity(a, b, "chamfer"))
    errs = [np.abs(np.asarray(pairwise_set_similarity(a, b, "smooth_chamfer", alpha=al)) - cham).max()
            for al in (4.0, 16.0, 64.0, 256.0)]
    assert all(e1 > e2 for e1, e2 in zip(errs, errs[1:]))
    assert errs[-1] < 0.01


def test_smooth_chamfer_no_overflow_in_bfloat16():
    x = jnp.ones((2, 4, 8), jnp.bfloat16) / jnp.sqrt(8.0).astype(jnp.bfloat16)
    s = pairwise_set_similarity(x, x, "smooth_chamfer")
    assert s.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(s)))
    np.testing.assert_allclose(s, 1.0 + np.log(4) / 16, atol=1e-2)


def test_maxmatch_gradient_is_exactly_on_matched_cells():
    rng = np.random.default_rng(11)
    c = jnp.asarray(rng.uniform(-1, 1, size=(6, 4, 4)).astype(np.float32))
    from mmjax import matching
    cols = np.asarray(matching.solve(c, "enumerate"))
    g = np.asarray(jax.grad(lambda x: jnp.sum(block_similarity(x, "maxmatch")))(c))
    want = np.zeros_like(g)
    for b in range(6):
        want[b, np.arange(4), cols[b]] = np.exp(np.asarray(c)[b, np.arange(4), cols[b]]) / 4
    np.testing.assert_allclose(g, want, rtol=1e-6)
    assert np.all((g != 0).sum(axis=(-2, -1)) == 4)


def test_maxmatch_gradient_wrt_sets_is_chain_rule_through_c():
    a, b = sets(12, ba=2, bb=3)
    w = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32))
    from mmjax.similarity import block_cosines
    ga, gb = jax.grad(lambda x, y: jnp.sum(w * pairwise_set_similarity(x, y, "maxmatch")), (0, 1))(a, b)
    c = block_cosines(jnp.asarray(a), jnp.asarray(b))
    gc = jax.grad(lambda cc: jnp.sum(w * block_similarity(cc, "maxmatch")))(c)
    np.testing.assert_allclose(ga, np.einsum("inkj,njd->ikd", gc, b), atol=1e-6)
    np.testing.assert_allclose(gb, np.einsum("inkj,ikd->njd", gc, a), atol=1e-6)


@pytest.mark.parametrize("kind", DETERMINISTIC)
def test_all_pairs_equals_per_pair_loop(kind):
    a, b = sets(13, ba=7, bb=9)
    full = np.asarray(pairwise_set_similarity(a, b, kind))
    loop = np.array([[float(pairwise_set_similarity(a[i:i + 1], b[n:n + 1], kind)[0, 0]) for n in range(9)]
                     for i in range(7)])
    np.testing.assert_allclose(full, loop, atol=1e-6)


def test_inference_kind_rule():
    """A MaxMatch (S_H) model is scored at inference by top-k; every other kind by itself; the paper's name 'S_H'
    resolves to 'maxmatch' (tests/test_api_errors.py); unknown kinds refused."""
    assert inference_kind("maxmatch") == "maxmatch_topk"
    assert reported_kinds("maxmatch") == ("maxmatch_topk", "maxmatch")
    assert all(inference_kind(k) == k and reported_kinds(k) == (k,) for k in KINDS if k != "maxmatch")
    assert inference_kind("S_H") == "maxmatch_topk" and reported_kinds("S_H") == ("maxmatch_topk", "maxmatch")
    with pytest.raises(ValueError, match="unknown similarity kind"):
        inference_kind("hausdorff")


def test_sinkhorn_soft_approaches_maxmatch_linear():
    a, b = sets(14)
    lin = np.asarray(pairwise_set_similarity(a, b, "maxmatch", s_h=0.0))
    soft = np.asarray(pairwise_set_similarity(a, b, "sinkhorn_soft", s_h=0.0, sinkhorn_tau=0.01,
                                              sinkhorn_iters=300))
    np.testing.assert_allclose(soft, lin, atol=0.02)
    assert np.all(soft <= lin + 5e-3)  # plans are doubly stochastic only up to convergence error


def test_bad_input_names_argument_and_shape():
    a, b = sets(15)
    with pytest.raises(ValueError, match=r"a must be \[Ba, K, D\]"):
        pairwise_set_similarity(a[0], b, "mil")
    with pytest.raises(ValueError, match="dimension mismatch.*D=8.*D=6"):
        pairwise_set_similarity(a, b[..., :6], "mil")
    with pytest.raises(ValueError, match=r"b_mask must have shape \(6, 4\)"):
        pairwise_set_similarity(a, b, "mil", None, np.ones((6, 3), bool))
    with pytest.raises(ValueError, match="unknown similarity kind"):
        pairwise_set_similarity(a, b, "hausdorff")
