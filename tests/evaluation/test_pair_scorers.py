"""`EmbeddingScorer` pairs/matrix modes and `pair_diagonal` against a plain numpy all-pairs reference."""

import jax
import numpy as np
import pytest

from mmjax.evaluation.scorers import EmbeddingScorer, pair_diagonal


def _bilinear_all_pairs(img, txt, xp=np):
    """A non-separable all-pairs score: s(i, t) = tanh(v_i · W t_j) + |v_i|₁ · t_j[0] (tree inputs; xp = np or jnp)."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10.0
    v, t = img["v"], txt["t"]
    return xp.tanh(v @ w @ t.T) + xp.abs(v).sum(-1, keepdims=True) * t[None, :, 0]


def test_pair_diagonal_is_the_matrix_diagonal():
    rng = np.random.default_rng(0)
    img = {"v": rng.normal(size=(7, 3)).astype(np.float32)}
    txt = {"t": rng.normal(size=(7, 4)).astype(np.float32)}
    jscore = lambda i, t: _bilinear_all_pairs(i, t, xp=jax.numpy)  # noqa: E731
    np.testing.assert_allclose(np.asarray(jax.jit(lambda i, t: pair_diagonal(jscore, i, t))(img, txt)),
                               np.diag(_bilinear_all_pairs(img, txt)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 5, 8, 13])
def test_pairs_mode_pads_to_a_power_of_two_and_matches_matrix_mode(n):
    rng = np.random.default_rng(n)
    images = {f"im{i}": rng.normal(size=3).astype(np.float32) for i in range(4)}
    records = [f"im{i % 4}" for i in range(n)]
    captions = [f"cap{j % 5}" for j in range(n)]
    cap_vec = {f"cap{j}": rng.normal(size=4).astype(np.float32) for j in range(5)}
    enc_img = lambda rs: {"v": np.stack([images[r] for r in rs])}  # noqa: E731
    enc_txt = lambda cs: {"t": np.stack([cap_vec[c] for c in cs])}  # noqa: E731
    seen = []

    def pairs(img, txt):
        seen.append(len(img["v"]))
        return np.array([_bilinear_all_pairs({"v": img["v"][p:p + 1]}, {"t": txt["t"][p:p + 1]})[0, 0]
                         for p in range(len(img["v"]))])

    got = EmbeddingScorer(enc_img, enc_txt, pairs, image_key=lambda r: r)(records, captions)
    ref = EmbeddingScorer(enc_img, enc_txt, _bilinear_all_pairs, mode="matrix", image_key=lambda r: r)(records,
                                                                                                         captions)
    want = np.array([_bilinear_all_pairs(enc_img([r]), enc_txt([c]))[0, 0] for r, c in zip(records, captions)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)
    assert got.shape == (n,) and seen == [max(8, 1 << (n - 1).bit_length())]
