"""Embed + chunked set scoring + retrieval metrics (`mmjax.evaluation.embed`)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from mmjax.batching import batched_apply
from mmjax.evaluation.embed import embed_retrieval_model, evaluate_retrieval, score_sets
from mmjax.models.retrieval import SetRetrievalModel
from mmjax.similarity import pairwise_set_similarity

K = 3


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


class FirstKTower(nn.Module):
    """Image tower: the first K region features, normalised (no parameters)."""

    @nn.compact
    def __call__(self, x, mask, train=False):
        return {"set": _unit(x[:, :K]), "mask": mask[:, :K], "global": _unit(x.mean(axis=1))}


class OneHotTextTower(nn.Module):
    """Caption tower: element j = one-hot of token j (perfect model) or a learned random embedding."""
    dim: int
    random: bool = False

    @nn.compact
    def __call__(self, ids, mask, train=False):
        if self.random:
            e = nn.Embed(1000, self.dim)(ids[:, :K])
        else:
            e = jax.nn.one_hot(ids[:, :K], self.dim)
        return {"set": _unit(e), "mask": mask[:, :K], "global": _unit(e.mean(axis=1)), "attention": None}


def _data(n_images, caps_per_image, dim, rng, perfect=True):
    if perfect:
        feats = np.repeat(np.eye(dim, dtype=np.float32)[:n_images, None, :], K + 1, axis=1)
    else:
        feats = rng.standard_normal((n_images, K + 1, dim)).astype(np.float32)
    c2i = np.repeat(np.arange(n_images), caps_per_image)
    ids = np.repeat(c2i[:, None], 5, axis=1) if perfect else rng.integers(0, 1000, (len(c2i), 5))
    return feats, np.ones(feats.shape[:2], bool), ids.astype(np.int32), np.ones(ids.shape, bool), c2i


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk"])
def test_perfect_model_gives_all_recalls_100(kind):
    n, dim = 23, 32
    feats, fm, ids, im, c2i = _data(n, 5, dim, None, perfect=True)
    model = SetRetrievalModel(image_tower=FirstKTower(), text_tower=OneHotTextTower(dim))
    variables = model.init(jax.random.key(0), feats[:2], fm[:2], ids[:2], im[:2])
    img, txt = embed_retrieval_model(model, variables, feats, fm, ids, im, batch_size=7)  # 23 = 3·7 + 2: padded
    assert img["set"].shape == (n, K, dim) and txt["set"].shape == (5 * n, K, dim)
    res = evaluate_retrieval(img, txt, c2i, kinds=(kind,), fold_counts=(1,), image_chunk=5, caption_tile=17)
    m = res[kind]["all"]
    for key in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"):
        assert m[key] == 100.0
    assert m["rsum"] == 600.0 and m["i2t_medr"] == 1.0 and m["t2i_meanr"] == 1.0


def test_random_model_recalls_near_chance():
    n, cpi, dim = 200, 5, 64
    rng = np.random.default_rng(0)
    feats, fm, ids, im, c2i = _data(n, cpi, dim, rng, perfect=False)
    model = SetRetrievalModel(image_tower=FirstKTower(), text_tower=OneHotTextTower(dim, random=True))
    variables = model.init(jax.random.key(1), feats[:2], fm[:2], ids[:2], im[:2])
    img, txt = embed_retrieval_model(model, variables, feats, fm, ids, im, batch_size=64)
    res = evaluate_retrieval(img, txt, c2i, kinds=("maxmatch_topk", "maxmatch"), fold_counts=(1, 5))
    for kind in ("maxmatch_topk", "maxmatch"):
        m = res[kind]["all"]
        for k in (1, 5, 10):
            p_t2i = k / n  # one positive image among n
            p_i2t = 1 - np.prod([(1 - k / (n * cpi - j)) for j in range(cpi)])  # best of 5 positives in the top k
            for key, p, count in ((f"t2i_r{k}", p_t2i, n * cpi), (f"i2t_r{k}", p_i2t, n)):
                tol = 100 * 4 * np.sqrt(p * (1 - p) / count) + 0.5
                assert abs(m[key] - 100 * p) < tol, (kind, key, m[key], 100 * p)
        assert set(res[kind]) == {"all", "folds5", "score_seconds"}


def _sets(rng, n, k, d, masked):
    x = rng.standard_normal((n, k, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    mask = np.ones((n, k), bool)
    if masked:
        valid = rng.integers(1, k + 1, n)
        mask = np.arange(k)[None] < valid[:, None]
    return x, mask


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk", "smooth_chamfer", "mil", "chamfer"])
@pytest.mark.parametrize("masked", [False, True])
def test_chunked_scores_equal_unchunked(kind, masked):
    rng = np.random.default_rng(1)
    a, am = _sets(rng, 13, 4, 8, masked)
    b, bm = _sets(rng, 29, 3, 8, masked)
    with jax.default_matmul_precision("float32"):
        ref = np.asarray(pairwise_set_similarity(a, b, kind, am, bm))
        got = score_sets(a, b, kind, am, bm, image_chunk=5, caption_tile=7)  # neither divides: padded tiles
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("masked", [False, True])
def test_exact_assignment_scores_equal_scipy(masked):
    rng = np.random.default_rng(2)
    a, am = _sets(rng, 9, 4, 6, masked)
    b, bm = _sets(rng, 11, 4, 6, masked)
    with jax.default_matmul_precision("float32"):
        got = score_sets(a, b, "maxmatch", am, bm, image_chunk=4, caption_tile=5, s_h=1.0)
    ref = np.empty_like(got)
    for i in range(len(a)):
        for n in range(len(b)):
            c = a[i][am[i]].astype(np.float64) @ b[n][bm[n]].astype(np.float64).T
            r, col = linear_sum_assignment(c, maximize=True)
            ref[i, n] = np.mean(np.expm1(c[r, col]))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_batched_apply_pads_last_batch_and_compiles_once():
    calls = []

    def fn(x, m):
        calls.append(x.shape)  # runs only while tracing
        return {"y": x * 2, "m": m, "aux": None}

    x = np.arange(10, dtype=np.float32)[:, None]
    out = batched_apply(fn, (x, None), batch_size=4)
    np.testing.assert_array_equal(out["y"], 2 * x)
    assert calls == [(4, 1)]


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk"])
def test_slab_scoring_equals_block_form_with_ties_masks_and_rectangular_sets(kind):
    """score_sets takes the element-major slab path for these kinds; integer-valued sets give exact ties."""
    rng = np.random.default_rng(3)
    a = rng.integers(-1, 2, size=(11, 4, 5)).astype(np.float32)
    b = rng.integers(-1, 2, size=(19, 3, 5)).astype(np.float32)
    am, bm = rng.random((11, 4)) < 0.8, rng.random((19, 3)) < 0.8
    for masks in ((None, None), (am, bm), (am, None)):
        with jax.default_matmul_precision("float32"):
            ref = np.asarray(pairwise_set_similarity(a, b, kind, *masks, s_h=0.5, normalize=None))
            got = score_sets(a, b, kind, *masks, image_chunk=4, caption_tile=8, s_h=0.5)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_dict_solver_options_reach_the_solver():
    """Nested dict options are frozen for jit and thawed back (the block path with the auction solver)."""
    rng = np.random.default_rng(4)
    a, am = _sets(rng, 6, 4, 6, False)
    b, bm = _sets(rng, 7, 4, 6, False)
    with jax.default_matmul_precision("float32"):
        got = score_sets(a, b, "maxmatch", image_chunk=4, caption_tile=5, solver="auction",
                         solver_options={"auction": {"eps_start_frac": 0.5}})
        ref = score_sets(a, b, "maxmatch", image_chunk=4, caption_tile=5)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk", "smooth_chamfer"])
def test_nan_in_valid_element_is_nan_and_in_padding_is_ignored(kind):
    rng = np.random.default_rng(5)
    a, am = _sets(rng, 6, 4, 6, False)
    b, bm = _sets(rng, 9, 4, 6, False)
    bm[3, 2] = False
    with jax.default_matmul_precision("float32"):
        clean = score_sets(a, b, kind, am, bm, image_chunk=4, caption_tile=5)
        b[3, 2] = np.nan  # masked: ignored
        b[5, 1] = np.nan  # valid: caption 5 scores NaN against every image
        got = score_sets(a, b, kind, am, bm, image_chunk=4, caption_tile=5)
    assert np.all(np.isnan(got[:, 5])) and np.all(np.isfinite(np.delete(got, 5, 1)))
    np.testing.assert_allclose(np.delete(got, 5, 1), np.delete(clean, 5, 1), rtol=1e-6, atol=1e-6)
