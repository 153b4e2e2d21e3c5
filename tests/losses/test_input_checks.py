"""Silent wrong inputs to the losses: out-of-range caption→image indices are refused eagerly (never under jit), and
a padded example whose set is empty (NaN score, `mmjax.similarity`) never reaches a loss or its gradients."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax import losses

N_IMAGES, C = 4, 3


def _scores(seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-0.5, 1.0, size=(N_IMAGES, N_IMAGES * C)).astype(np.float32)


def _caption_image():
    return np.repeat(np.arange(N_IMAGES), C)


def _sets(seed, n, k=3, d=8):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, k, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    g = rng.normal(size=(n, d)).astype(np.float32)
    return {"set": x, "residual": x.copy(), "global": g / np.linalg.norm(g, axis=-1, keepdims=True),
            "mask": np.ones((n, k), bool)}


CALLS = {
    "triplet_loss": lambda ci: losses.triplet_loss(_scores(), ci),
    "triplet_loss_all": lambda ci: losses.triplet_loss(_scores(), ci, hard_negative="all"),
    "infonce_loss": lambda ci: losses.infonce_loss(_scores(), ci),
    "positive_mask": lambda ci: losses.positive_mask(ci, N_IMAGES),
    "positive_mask_ids": lambda ci: losses.positive_mask(ci, N_IMAGES, image_ids=np.arange(N_IMAGES)),
    "maxmatch_objective": lambda ci: losses.maxmatch_objective(_sets(0, N_IMAGES), _sets(1, N_IMAGES * C), ci),
}


@pytest.mark.parametrize("bad", [-1, N_IMAGES, 10 ** 6])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_out_of_range_caption_image_is_refused_naming_argument_value_and_range(call, bad):
    """-1 used to wrap to the last image (a finite, wrong loss) and N_images to read a NaN fill."""
    ci = _caption_image()
    ci[5] = bad
    with pytest.raises(ValueError, match=rf"caption_image\[5\] = {bad} is out of range \[0, {N_IMAGES}\)"):
        CALLS[call](ci)
    with pytest.raises(ValueError, match=r"caption_image\[5\]"):
        CALLS[call](list(ci))          # a list is host data too


@pytest.mark.parametrize("call", sorted(CALLS))
def test_in_range_indices_pass_and_traced_indices_are_not_checked(call):
    ci = _caption_image()
    eager = CALLS[call](ci)
    # Under jit the indices are traced: no check, no host transfer, and the same numbers as eagerly.
    jitted = jax.jit(CALLS[call])(jnp.asarray(ci))
    for e, j in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted)):
        np.testing.assert_allclose(np.asarray(e), np.asarray(j), rtol=1e-6, atol=1e-6)
    bad = ci.copy()
    bad[0] = -1
    jax.jit(CALLS[call])(jnp.asarray(bad))   # traced: documented as unchecked (check on the host instead)


def _padded_batch(empty_example):
    """4 images × 2 captions, the last image padded (invalid); `empty_example`'s image set is fully masked."""
    image, text = _sets(2, 4), _sets(3, 8)
    image["mask"][empty_example] = False
    ci = np.repeat(np.arange(4), 2)
    valid = np.array([True, True, True, False])
    return image, text, ci, valid


@pytest.mark.parametrize("kind", ["mil", "average", "average_sigmoid", "chamfer", "smooth_chamfer", "maxmatch",
                                  "maxmatch_topk"])
@pytest.mark.parametrize("units", ["native", "cosine"])
@pytest.mark.parametrize("warmup", [True, False])
def test_padded_example_with_an_empty_set_keeps_the_loss_and_gradients_finite(kind, units, warmup):
    """An empty set scores NaN (so the NaN guards see it), but a padded example's scores are masked with
    jnp.where before use: the objective and its gradients stay finite."""
    image, text, ci, valid = _padded_batch(empty_example=3)
    cfg = {"similarity": kind, "score_units": units}

    def loss(img_set, txt_set):
        i = {**image, "set": img_set, "residual": img_set}
        t = {**text, "set": txt_set, "residual": txt_set}
        return losses.maxmatch_objective(i, t, ci, cfg, warmup=warmup, image_valid=valid,
                                         caption_valid=valid[ci])[0]

    for fn in (jax.value_and_grad(loss, argnums=(0, 1)), jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))):
        value, (gi, gt) = fn(image["set"], text["set"])
        assert np.isfinite(float(value))
        assert np.all(np.isfinite(gi)) and np.all(np.isfinite(gt))


@pytest.mark.parametrize("kind", ["mil", "chamfer", "smooth_chamfer", "maxmatch", "maxmatch_topk"])
def test_valid_example_with_an_empty_set_makes_the_ranking_losses_nan(kind):
    """No finite sentinel (−1e9, −5e8, −3.1e7, 0) ranks an empty set silently: the training NaN guard sees it."""
    image, text, ci, valid = _padded_batch(empty_example=1)
    cfg = {"similarity": kind, "lambda_gd": 0.0, "lambda_isd": 0.0, "lambda_div": 0.0, "lambda_mmd": 0.0}
    total, metrics = losses.maxmatch_objective(image, text, ci, cfg, image_valid=valid, caption_valid=valid[ci])
    assert np.isnan(float(total)) and np.isnan(float(metrics["loss/triplet"]))


def test_triplet_and_infonce_ignore_nan_scores_of_padded_examples():
    scores = _scores(3)
    ci = _caption_image()
    valid = np.array([True, True, False, True])
    clean = {name: fn(scores, ci, image_valid=valid, caption_valid=valid[ci])[0]
             for name, fn in (("tri", losses.triplet_loss), ("all", functools.partial(losses.triplet_loss,
                                                                                     hard_negative="all")),
                              ("nce", losses.infonce_loss))}
    poisoned = scores.copy()
    poisoned[2, :] = np.nan          # the padded image's row
    poisoned[:, ci == 2] = np.nan    # and its captions' columns
    for name, fn in (("tri", losses.triplet_loss), ("all", functools.partial(losses.triplet_loss,
                                                                            hard_negative="all")),
                     ("nce", losses.infonce_loss)):
        value, grad = jax.value_and_grad(lambda s: fn(s, ci, image_valid=valid, caption_valid=valid[ci])[0])(
            poisoned)
        assert float(value) == float(clean[name]), name
        assert np.all(np.isfinite(grad)) and np.all(np.asarray(grad)[2] == 0), name
