"""Degenerate sets: an empty set (mask all False) scores NaN for every kind, eagerly and under jit, with finite
gradients for every other pair; K = 0 is refused naming the shape; a non-finite valid cell makes `average_sigmoid`
NaN; and on ordinary inputs every masked kind is bitwise the formula it was before these rules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax import matching
from mmjax.similarity import (KINDS, block_similarity, element_major, f_s, pairwise_set_similarity, slab_cosines,
                              slab_similarity)

MASKABLE = [k for k in KINDS if k != "sinkhorn_soft"]  # sinkhorn_soft takes square unmasked blocks only


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _sets(seed, ba=4, bb=3, k_v=4, k_t=3, d=8):
    rng = np.random.default_rng(seed)
    a = _unit(rng.normal(size=(ba, k_v, d))).astype(np.float32)
    b = _unit(rng.normal(size=(bb, k_t, d))).astype(np.float32)
    return a, b


def _masks(a, b, seed=0):
    rng = np.random.default_rng(seed + 100)
    am = rng.random(a.shape[:2]) < 0.7
    bm = rng.random(b.shape[:2]) < 0.7
    am[:, 0] = bm[:, 0] = True   # every set non-empty unless emptied below
    return am, bm


def _eager_and_jit(kind, a, b, am, bm):
    fn = lambda *x: pairwise_set_similarity(*x[:2], kind, *x[2:])  # noqa: E731
    return np.asarray(fn(a, b, am, bm)), np.asarray(jax.jit(fn)(a, b, am, bm))


@pytest.mark.parametrize("kind", MASKABLE)
def test_empty_set_scores_nan_for_every_kind_eager_and_jit(kind):
    a, b = _sets(0)
    am, bm = _masks(a, b)
    with jax.default_matmul_precision("float32"):
        clean = _eager_and_jit(kind, a, b, am.copy(), bm.copy())
        am[2] = False   # image set 2 is empty
        bm[1] = False   # caption set 1 is empty
        want_nan = np.zeros(clean[0].shape, bool)
        want_nan[2, :] = want_nan[:, 1] = True
        for got, ref in zip(_eager_and_jit(kind, a, b, am, bm), clean):
            np.testing.assert_array_equal(np.isnan(got), want_nan)
            np.testing.assert_array_equal(got[~want_nan], ref[~want_nan])   # the other pairs are untouched


@pytest.mark.parametrize("kind", MASKABLE)
def test_empty_set_keeps_gradients_of_other_pairs_finite(kind):
    """The NaN is selected after the reduction: a loss over the other pairs has finite gradients everywhere (the
    empty pair's cotangent is exactly 0), and a loss that reads the NaN pair through jnp.where does too."""
    a, b = _sets(1)
    am, bm = _masks(a, b, 1)
    am[0] = False
    keep = np.ones((a.shape[0], b.shape[0]), bool)
    keep[0] = False

    def loss(x, y):
        s = pairwise_set_similarity(x, y, kind, am, bm)
        return jnp.sum(jnp.where(keep, s, 0.0))

    for fn in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
        ga, gb = fn(a, b)
        assert np.all(np.isfinite(ga)) and np.all(np.isfinite(gb))
        assert np.any(gb != 0)


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk"])
def test_slab_form_scores_an_empty_set_nan_as_the_block_form(kind):
    a, b = _sets(2, k_v=4, k_t=4)
    am, bm = _masks(a, b, 2)
    am[1] = False
    bm[2] = False
    with jax.default_matmul_precision("float32"):
        slab = np.asarray(jax.jit(lambda x, y, m, n: slab_similarity(slab_cosines(x, element_major(y)), kind, m, n))(
            a, b, am, bm))
        block = np.asarray(pairwise_set_similarity(a, b, kind, am, bm))
    assert np.all(np.isnan(slab[1])) and np.all(np.isnan(slab[:, 2]))
    np.testing.assert_allclose(slab, block, rtol=1e-6, atol=1e-6)   # NaN where the block form is NaN


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("side", ["a", "b"])
def test_zero_elements_per_set_is_refused_naming_the_shape(kind, side):
    a, b = _sets(3)
    if side == "a":
        a = a[:, :0]
    else:
        b = b[:, :0]
    shape = (a if side == "a" else b).shape
    with pytest.raises(ValueError, match=rf"{side} must have K >= 1 elements per set, got shape "
                                         rf"\({shape[0]}, 0, {shape[2]}\)"):
        pairwise_set_similarity(a, b, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_element_blocks_are_refused_by_block_and_slab_forms(kind):
    with pytest.raises(ValueError, match=r"K_V >= 1 and K_T >= 1.*shape \(2, 3, 0, 4\)"):
        block_similarity(jnp.zeros((2, 3, 0, 4)), kind)
    if kind in ("maxmatch", "maxmatch_topk"):
        with pytest.raises(ValueError, match=r"K_V >= 1 and K_T >= 1, got shape \(3, 2, 0, 5\)"):
            slab_similarity(jnp.zeros((3, 2, 0, 5)), kind)


@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_average_sigmoid_non_finite_valid_cell_is_nan_and_masked_one_is_ignored(value):
    """σ(±inf) is finite (0 or 1), which used to turn an infinite cell into a plausible score (≈ 0.46)."""
    c = np.random.default_rng(4).uniform(-1, 1, size=(3, 2, 4, 4)).astype(np.float32)
    c[1, 0, 2, 3] = value           # valid cell of pair (1, 0)
    c[2, 1, 3, 0] = value           # masked cell of pair (2, 1)
    row = np.ones((3, 2, 4), bool)
    row[2, 1, 3] = False
    col = np.ones((3, 2, 4), bool)
    fn = lambda x, r, k: block_similarity(x, "average_sigmoid", r, k)  # noqa: E731
    for got in (np.asarray(fn(c, row, col)), np.asarray(jax.jit(fn)(c, row, col))):
        want_nan = np.zeros((3, 2), bool)
        want_nan[1, 0] = True
        np.testing.assert_array_equal(np.isnan(got), want_nan)
        assert np.all(np.isfinite(got[~want_nan]))
    no_mask = np.asarray(block_similarity(c, "average_sigmoid"))   # without masks: both pairs NaN
    assert np.isnan(no_mask[1, 0]) and np.isnan(no_mask[2, 1])


# ---- ordinary inputs: bitwise the formulas before the empty-set / non-finite rules (written out here) --------

_NEG = -1e9


def _old_block_similarity(c, kind, row_mask, col_mask, *, alpha=16.0, s_h=1.0, topk_k=None):
    """`block_similarity` of every masked kind as it was before the empty-set and average_sigmoid rules."""
    c = c.astype(jnp.float32)
    row = jnp.broadcast_to(row_mask, c.shape[:-1])
    col = jnp.broadcast_to(col_mask, c.shape[:-2] + (c.shape[-1],))
    cell = row[..., :, None] & col[..., None, :]
    count = lambda m: jnp.maximum(jnp.sum(m, axis=-1), 1).astype(jnp.float32)  # noqa: E731
    n_v, n_t = count(row), count(col)
    if kind == "mil":
        return jnp.max(jnp.where(cell, c, _NEG), axis=(-2, -1))
    if kind == "average":
        return jnp.sum(jnp.where(cell, c, 0.0), axis=(-2, -1)) / (n_v * n_t)
    if kind == "average_sigmoid":
        return jnp.sum(jnp.where(cell, jax.nn.sigmoid(1.0 * c + 0.0), 0.0), axis=(-2, -1)) / (n_v * n_t)
    if kind == "chamfer":
        masked = jnp.where(cell, c, _NEG)
        rows = jnp.sum(jnp.where(row, jnp.max(masked, axis=-1), 0.0), axis=-1) / n_v
        cols = jnp.sum(jnp.where(col, jnp.max(masked, axis=-2), 0.0), axis=-1) / n_t
        return 0.5 * (rows + cols)
    if kind == "smooth_chamfer":
        scaled = jnp.where(cell, alpha * c, _NEG)
        rows = jnp.sum(jnp.where(row, jax.nn.logsumexp(scaled, axis=-1), 0.0), axis=-1) / (alpha * n_v)
        cols = jnp.sum(jnp.where(col, jax.nn.logsumexp(scaled, axis=-2), 0.0), axis=-1) / (alpha * n_t)
        return 0.5 * (rows + cols)
    if kind == "maxmatch":
        bad = jnp.any(cell & ~jnp.isfinite(c), axis=(-2, -1))
        safe = jnp.where(cell & ~bad[..., None, None], c, 0.0)
        target = jax.lax.stop_gradient(safe)
        cols = matching.solve(target, "auto", (row, col))
        matched = cols >= 0
        picked = jnp.take_along_axis(safe, jnp.clip(cols, 0, c.shape[-1] - 1)[..., None], axis=-1)[..., 0]
        score = jnp.sum(jnp.where(matched, f_s(picked, s_h), 0.0), axis=-1) / count(matched)
        return jnp.where(bad, jnp.nan, score)
    if kind == "maxmatch_topk":
        k_v, k_t = c.shape[-2:]
        flat = jnp.where(cell, c, _NEG).reshape(c.shape[:-2] + (k_v * k_t,))
        k_static, k_eff = min(k_v, k_t), jnp.minimum(jnp.sum(row, -1), jnp.sum(col, -1))
        top = jax.lax.top_k(flat, k_static)[0]
        take = jnp.arange(k_static) < k_eff[..., None]
        score = jnp.sum(jnp.where(take, f_s(top, s_h), 0.0), axis=-1) / jnp.maximum(k_eff, 1).astype(jnp.float32)
        return jnp.where(jnp.any(cell & jnp.isnan(c), axis=(-2, -1)), jnp.nan, score)
    raise AssertionError(kind)


def _bits(x):
    return np.asarray(x).view(np.uint32)


@pytest.mark.parametrize("kind", MASKABLE)
@pytest.mark.parametrize("all_valid", [True, False])
def test_ordinary_scores_and_gradients_are_bitwise_the_old_formula(kind, all_valid):
    """Training passes masks (all True from the towers): values and gradients of non-empty sets are unchanged to
    the bit, eagerly and under jit."""
    a, b = _sets(5, ba=6, bb=5, k_v=4, k_t=4)
    am, bm = (np.ones(a.shape[:2], bool), np.ones(b.shape[:2], bool)) if all_valid else _masks(a, b, 5)
    w = np.random.default_rng(6).normal(size=(a.shape[0], b.shape[0])).astype(np.float32)
    new = lambda x, y: pairwise_set_similarity(x, y, kind, am, bm)  # noqa: E731

    def old(x, y):
        c = jnp.einsum("ikd,njd->inkj", x, y, preferred_element_type=jnp.float32)
        return _old_block_similarity(c, kind, am[:, None, :], bm[None, :, :])

    def c_new(x, y):  # the same cosines as `old` (the GEMM of pairwise_set_similarity may round differently)
        c = jnp.einsum("ikd,njd->inkj", x, y, preferred_element_type=jnp.float32)
        return block_similarity(c, kind, am[:, None, :], bm[None, :, :])

    with jax.default_matmul_precision("float32"):
        for wrap in (lambda f: f, jax.jit):
            np.testing.assert_array_equal(_bits(wrap(c_new)(a, b)), _bits(wrap(old)(a, b)))
            g_new = wrap(jax.grad(lambda x, y: jnp.sum(w * c_new(x, y)), argnums=(0, 1)))(a, b)
            g_old = wrap(jax.grad(lambda x, y: jnp.sum(w * old(x, y)), argnums=(0, 1)))(a, b)
            for gn, go in zip(g_new, g_old):
                np.testing.assert_array_equal(_bits(gn), _bits(go))
        assert np.all(np.isfinite(np.asarray(new(a, b))))
