"""Image chunk of the all-pairs Flow-CLIP scorer chosen from a byte budget (`chunk_for_budget`)."""

import functools

import jax
import numpy as np
import pytest

import mmjax.flowclip as fc
from mmjax.flowclip.all_pairs import chunk_for_budget
from mmjax.flowclip.options import DEFAULTS

TAU = 0.02


def inputs(seed, bi, bt, l_tok, n, d):
    rng = np.random.default_rng(seed)
    valid = rng.random((bt, l_tok)) < 0.7
    valid[:, 0] = True
    valid[1] = False  # a caption with no valid token scores its global term only
    image = {"global": rng.normal(size=(bi, d)).astype(np.float32),
             "patches": rng.normal(size=(bi, n, d)).astype(np.float32)}
    text = {"global": rng.normal(size=(bt, d)).astype(np.float32),
            "tokens": np.where(valid[..., None], rng.normal(size=(bt, l_tok, d)), 0).astype(np.float32),
            "valid": valid}
    params = {"M": np.eye(d, dtype=np.float32) + 0.1 * rng.normal(size=(d, d)).astype(np.float32),
              "M_tok": np.eye(d, dtype=np.float32) + 0.1 * rng.normal(size=(d, d)).astype(np.float32),
              "W": (rng.normal(size=(d, d)) / np.sqrt(d)).astype(np.float32)}
    return params, image, text


def test_chunk_arithmetic():
    per_image = 4 * 9 * 64 * 16 * 49  # bytes of one image's Gram activation: 9 float32 [Bt, L, N]
    assert chunk_for_budget(DEFAULTS.score_chunk_bytes, 64, 64, 16, 49, 512) == (32 << 20) // per_image == 18
    assert chunk_for_budget(per_image * 5 + per_image - 1, 64, 64, 16, 49, 512) == 5  # floor
    assert chunk_for_budget(1, 64, 64, 16, 49, 512) == 1  # never 0
    assert chunk_for_budget(1 << 40, 64, 64, 16, 49, 512) == 64  # never more than Bi
    assert chunk_for_budget(per_image * 3, 64, 64, 16, 49, 512, method="direct") == (3 * 49) // 512 + 1 == 1  # w = d
    with pytest.raises(ValueError, match="chunk_budget_bytes must be a positive int"):
        chunk_for_budget(0, 64, 64, 16, 49, 512)


@pytest.mark.parametrize("method", ["gram", "direct"])
def test_budget_chunks_give_the_same_scores(method):
    bi, bt, l_tok, n, d = 7, 5, 4, 6, 8
    params, image, text = inputs(0, bi, bt, l_tok, n, d)
    width = n if method == "gram" else d
    per_image = 4 * 9 * bt * l_tok * width
    with jax.default_matmul_precision("float32"):
        ref = np.asarray(fc.score_pairs(params, image, text, tau_p=TAU, method="reference", chunk_size=bi))
        for budget, chunk in ((1, 1), (3 * per_image, 3), (1 << 30, bi)):  # 3 does not divide 7: padded chunk
            assert chunk_for_budget(budget, bi, bt, l_tok, n, d, method) == chunk
            score = jax.jit(functools.partial(fc.score_pairs, tau_p=TAU, method=method, chunk_budget_bytes=budget))
            np.testing.assert_allclose(score(params, image, text), ref, rtol=1e-5, atol=1e-5)


def test_smaller_budget_smaller_activation():
    """XLA's buffer assignment of the compiled scorer shrinks with the budget (what the budget is meant to bound)."""
    params, image, text = inputs(1, 32, 16, 8, 12, 16)

    def temp_bytes(budget):
        fn = functools.partial(fc.score_pairs, tau_p=TAU, chunk_budget_bytes=budget)
        return jax.jit(fn).lower(params, image, text).compile().memory_analysis().temp_size_in_bytes

    per_image = 4 * 9 * 16 * 8 * 12
    small, large = temp_bytes(2 * per_image), temp_bytes(32 * per_image)
    assert small < large / 4, (small, large)
    assert small < 2 * per_image * 2 + 64 * 1024, small  # activation ≈ budget (+ inputs of one chunk)


def test_explicit_chunk_size_wins_and_is_validated():
    params, image, text = inputs(2, 4, 3, 2, 5, 8)
    with jax.default_matmul_precision("float32"):
        a = fc.score_pairs(params, image, text, tau_p=TAU, chunk_size=3, chunk_budget_bytes=1)
        b = fc.score_pairs(params, image, text, tau_p=TAU)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # 0 means "from the budget" (the config's default), like None
    with jax.default_matmul_precision("float32"):
        np.testing.assert_allclose(fc.score_pairs(params, image, text, tau_p=TAU, chunk_size=0), b, rtol=1e-6)
    with pytest.raises(ValueError, match="chunk_size must be a positive int, or 0 / None"):
        fc.score_pairs(params, image, text, chunk_size=-1)
    with pytest.raises(ValueError, match="chunk_budget_bytes must be a positive int"):
        fc.score_pairs(params, image, text, chunk_budget_bytes=-5)
