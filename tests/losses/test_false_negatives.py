"""`ignore_pairs` / `loss.false_negatives='ignore'` (docs/design.md#false-negatives) against brute-force numpy
references: an ignored pair is neither a negative nor a positive, in every form of both ranking losses."""

import jax.numpy as jnp
import numpy as np
import pytest

from mmjax import losses


def planted(seed, n_images=4, c=3, p=0.25):
    rng = np.random.default_rng(seed)
    s = rng.uniform(-0.5, 1.5, size=(n_images, n_images * c)).astype(np.float32)
    ci = np.repeat(np.arange(n_images), c)
    ignore = rng.random(s.shape) < p
    ignore[ci, np.arange(len(ci))] |= rng.random(len(ci)) < 0.5   # some positives marked too: they stay positives
    return s, ci, ignore


def brute_triplet(s, ci, ignore, margin, hard):
    """Per-anchor hinge lists over the negatives that are neither positive nor ignored (float64 loops)."""
    s = s.astype(np.float64)
    n_i, n_t = s.shape
    i2t, t2i = [], []
    for n in range(n_t):
        i = ci[n]
        negs = [m for m in range(n_t) if ci[m] != i and not ignore[i, m]]
        hinges = [max(0.0, margin + s[i, m] - s[i, n]) for m in negs]
        if hinges:
            i2t.append([max(hinges)] if hard else hinges)
        negs = [j for j in range(n_i) if j != i and not ignore[j, n]]
        hinges = [max(0.0, margin + s[j, n] - s[i, n]) for j in negs]
        if hinges:
            t2i.append([max(hinges)] if hard else hinges)
    mean = lambda terms: float(np.mean(np.concatenate(terms))) if terms else 0.0
    return mean(i2t) + mean(t2i)


@pytest.mark.parametrize("hard", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_triplet_with_ignored_pairs_equals_brute_force(hard, seed):
    s, ci, ignore = planted(seed)
    got, _ = losses.triplet_loss(s, ci, margin=0.2, hard_negative="max" if hard else "all", ignore_pairs=ignore)
    np.testing.assert_allclose(got, brute_triplet(s, ci, ignore, 0.2, hard), rtol=1e-5)
    plain, _ = losses.triplet_loss(s, ci, margin=0.2, hard_negative="max" if hard else "all")
    assert abs(float(got) - float(plain)) > 1e-4   # the planted mask changes the loss (the test can fail)


def test_an_ignored_hardest_negative_gives_way_to_the_next():
    s, ci, _ = planted(3, p=0.0)
    s[0, 5] = 3.0                       # caption 5 (image 1) is by far image 0's hardest negative ...
    ignore = np.zeros(s.shape, bool)
    ignore[0, 5] = True                 # ... and is true of image 0
    got = losses.triplet_loss(s, ci, ignore_pairs=ignore)[0]
    buried = s.copy()
    buried[0, 5] = -1e3                 # the same pair made the easiest of all: never a hardest negative
    np.testing.assert_allclose(got, losses.triplet_loss(buried, ci)[0], rtol=1e-6)
    assert float(got) < float(losses.triplet_loss(s, ci)[0]) - 0.5


def ref_infonce(s, ci, ignore, tau):
    z = s.astype(np.float64) / tau
    y = ci[None, :] == np.arange(s.shape[0])[:, None]
    keep = y | ~ignore
    i2t = -np.mean([np.log(np.exp(z[i][y[i]]).sum() / np.exp(z[i][keep[i]]).sum()) for i in range(s.shape[0])])
    t2i = -np.mean([np.log(np.exp(z[ci[n], n]) / np.exp(z[:, n][keep[:, n]]).sum()) for n in range(s.shape[1])])
    return 0.5 * (i2t + t2i)


@pytest.mark.parametrize("seed", [0, 1])
def test_infonce_drops_ignored_pairs_from_its_denominators(seed):
    s, ci, ignore = planted(seed)
    got, _ = losses.infonce_loss(s, ci, temperature=0.1, ignore_pairs=ignore)
    np.testing.assert_allclose(got, ref_infonce(s, ci, ignore, 0.1), rtol=1e-5)
    none = np.zeros_like(ignore)
    np.testing.assert_allclose(losses.infonce_loss(s, ci, temperature=0.1, ignore_pairs=none)[0],
                               losses.infonce_loss(s, ci, temperature=0.1)[0], rtol=1e-6)


def test_ignore_pairs_shape_is_checked():
    s, ci, ignore = planted(0)
    for fn in (losses.triplet_loss, losses.infonce_loss):
        with pytest.raises(ValueError, match=r"ignore_pairs must have the scores' shape \(4, 12\)"):
            fn(s, ci, ignore_pairs=ignore[:, :-1])


def _outputs(rng, n, k=2, d=8):
    x = rng.normal(size=(n, k, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    g = rng.normal(size=(n, d))
    return {"set": x.astype(np.float32), "residual": x.astype(np.float32),
            "global": (g / np.linalg.norm(g, axis=-1, keepdims=True)).astype(np.float32)}


def test_objective_passes_the_mask_to_both_ranking_losses_and_refuses_a_mismatch():
    rng = np.random.default_rng(7)
    img, txt, ci = _outputs(rng, 4), _outputs(rng, 12), np.repeat(np.arange(4), 3)
    ignore = rng.random((4, 12)) < 0.3
    cfg = {"false_negatives": "ignore"}
    for warmup in (True, False, jnp.float32(0.25)):
        _, m = losses.maxmatch_objective(img, txt, ci, cfg, warmup=warmup, ignore_pairs=ignore)
        scores = losses.objective.AllPairsLayout().score(img["set"], txt["set"], "maxmatch",
                                                         **losses.similarity_options({}))
        ref_all = losses.triplet_loss(scores, ci, hard_negative="all", ignore_pairs=ignore)[0]
        ref_max = losses.triplet_loss(scores, ci, hard_negative="max", ignore_pairs=ignore)[0]
        w = float(warmup)
        np.testing.assert_allclose(m["loss/triplet"], w * ref_all + (1 - w) * ref_max, rtol=1e-5)
        np.testing.assert_allclose(m["loss/contrastive"],
                                   losses.infonce_loss(scores, ci, temperature=0.05, ignore_pairs=ignore)[0],
                                   rtol=1e-5)
    with pytest.raises(ValueError, match="needs ignore_pairs"):
        losses.maxmatch_objective(img, txt, ci, cfg)
    with pytest.raises(ValueError, match="false_negatives='keep' would treat"):
        losses.maxmatch_objective(img, txt, ci, ignore_pairs=ignore)
    with pytest.raises(ValueError, match="false_negatives must be one of"):
        losses.maxmatch_objective(img, txt, ci, {"false_negatives": "drop"}, ignore_pairs=ignore)
