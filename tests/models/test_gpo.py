"""GPO (VSE∞) and masked max pooling (docs/design.md#gpo, docs/design.md#testing)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.models.gpo import GPO, gpo_positional_encoding, sort_valid_descending
from mmjax.models.pooling import masked_max

B, N, D = 4, 6, 5


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    feats = rng.normal(size=(B, N, D)).astype(np.float32)
    mask = np.ones((B, N), bool)
    mask[0, 3:] = False
    mask[1, [0, 2, 5]] = False  # non-prefix
    mask[3, 1:] = False  # a single valid token
    return jnp.asarray(feats), jnp.asarray(mask)


@pytest.fixture(scope="module")
def gpo_and_params():
    feats, mask = make_inputs()
    gpo = GPO()
    variables = gpo.init(jax.random.PRNGKey(0), feats, mask)
    return gpo, variables, jax.jit(gpo.apply)


def test_positional_encoding_matches_vse_infty_formula():
    pe = np.zeros((7, 8))
    for p in range(7):
        for i in range(0, 8, 2):
            pe[p, i] = math.sin(p * math.exp(i * -(math.log(10000.0) / 8)))
            pe[p, i + 1] = math.cos(p * math.exp(i * -(math.log(10000.0) / 8)))
    np.testing.assert_allclose(gpo_positional_encoding(7, 8), pe, atol=1e-6)


def test_sort_valid_descending_matches_numpy():
    feats, mask = make_inputs()
    sorted_feats, sorted_mask = sort_valid_descending(feats, mask)
    for b in range(B):
        valid = np.asarray(feats)[b][np.asarray(mask)[b]]
        n = len(valid)
        np.testing.assert_array_equal(sorted_feats[b, :n], -np.sort(-valid, axis=0))
        np.testing.assert_array_equal(sorted_feats[b, n:], 0.0)
        np.testing.assert_array_equal(sorted_mask[b], np.arange(N) < n)


def test_weights_sum_to_one_and_pooling_is_weighted_order_statistics(gpo_and_params):
    gpo, variables, apply = gpo_and_params
    feats, mask = make_inputs()
    pooled, weights = apply(variables, feats, mask)
    n = np.asarray(mask).sum(1)
    np.testing.assert_allclose(weights.sum(1), 1.0, atol=1e-6)
    assert np.all(np.asarray(weights)[np.arange(N)[None] >= n[:, None]] < 1e-30)
    np.testing.assert_allclose(weights[3, 0], 1.0, atol=1e-6)  # one valid token → all weight on it
    for b in range(B):
        valid = np.asarray(feats, np.float64)[b][np.asarray(mask)[b]]
        ref = (np.asarray(weights, np.float64)[b, : n[b], None] * -np.sort(-valid, axis=0)).sum(0)
        np.testing.assert_allclose(pooled[b], ref, atol=1e-5)


def test_identical_features_return_that_feature(gpo_and_params):
    gpo, variables, apply = gpo_and_params
    _, mask = make_inputs()
    vec = jnp.asarray(np.random.default_rng(1).normal(size=(B, 1, D)), jnp.float32)
    pooled, _ = apply(variables, jnp.broadcast_to(vec, (B, N, D)), mask)
    np.testing.assert_allclose(pooled, vec[:, 0], atol=1e-5)


def test_padding_values_permutation_and_padding_length_do_not_matter(gpo_and_params):
    gpo, variables, apply = gpo_and_params
    feats, mask = make_inputs()
    pooled, weights = apply(variables, feats, mask)
    noisy = jnp.where(mask[..., None], feats, 1e6)
    np.testing.assert_array_equal(apply(variables, noisy, mask)[0], pooled)
    perm = np.random.default_rng(2).permutation(N)
    np.testing.assert_allclose(apply(variables, feats[:, perm], mask[:, perm])[0], pooled, atol=1e-6)
    # extra padding leaves the weights of the first n sorted positions unchanged (GRU runs on n steps only)
    padded = jnp.concatenate([feats, jnp.zeros((B, 3, D))], 1)
    pmask = jnp.concatenate([mask, jnp.zeros((B, 3), bool)], 1)
    pooled2, weights2 = gpo.apply(variables, padded, pmask)
    np.testing.assert_allclose(pooled2, pooled, atol=1e-6)
    np.testing.assert_allclose(weights2[:, :N], weights, atol=1e-6)


def test_gradients_finite(gpo_and_params):
    gpo, variables, _ = gpo_and_params
    feats, mask = make_inputs()
    grads = jax.jit(jax.grad(lambda v, x: gpo.apply(v, x, mask)[0].sum(), argnums=(0, 1)))(variables, feats)
    assert all(np.isfinite(g).all() for g in jax.tree_util.tree_leaves(grads))
    assert np.all(np.asarray(grads[1])[~np.asarray(mask)] == 0.0)


def test_masked_max_ignores_padding():
    feats, mask = make_inputs()
    out = masked_max(feats + 0.0, mask)
    noisy = jnp.where(mask[..., None], feats, 1e30)
    np.testing.assert_array_equal(masked_max(noisy, mask), out)
    for b in range(B):
        np.testing.assert_array_equal(out[b], np.asarray(feats)[b][np.asarray(mask)[b]].max(0))
    np.testing.assert_array_equal(masked_max(feats), np.asarray(feats).max(1))
    grad = jax.grad(lambda x: masked_max(x, mask).sum())(feats)
    assert np.all(np.asarray(grad)[~np.asarray(mask)] == 0.0)
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(masked_max(feats, jnp.zeros_like(mask)), 0.0)  # empty set → zero vector


def test_bad_shapes_raise():
    feats, mask = make_inputs()
    with pytest.raises(ValueError, match="mask"):
        masked_max(feats, mask[:, :2])
    with pytest.raises(ValueError, match="x must be"):
        masked_max(feats[0], None)
    with pytest.raises(ValueError, match="features"):
        GPO().init(jax.random.PRNGKey(0), feats[0], mask)
    with pytest.raises(ValueError, match="mask"):
        GPO().init(jax.random.PRNGKey(0), feats, mask[:2])
