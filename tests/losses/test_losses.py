"""Losses against brute-force / float64 numpy references (docs/design.md#losses, docs/design.md#testing)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax import losses


def batch(seed, n_images=4, c=5):
    rng = np.random.default_rng(seed)
    scores = rng.uniform(-0.5, 1.5, size=(n_images, n_images * c)).astype(np.float32)
    caption_image = np.repeat(np.arange(n_images), c)
    return scores, caption_image


def brute_triplet(s, ci, margin, hard):
    s = s.astype(np.float64)
    n_i, n_t = s.shape
    i2t_terms, t2i_terms = [], []
    for i in range(n_i):
        for n in range(n_t):
            if ci[n] != i:
                continue
            negs = [n2 for n2 in range(n_t) if ci[n2] != i]
            hinges = [max(0.0, margin + s[i, n2] - s[i, n]) for n2 in negs]
            i2t_terms.append(max(hinges) if hard else hinges)
    for n in range(n_t):
        negs = [i for i in range(n_i) if i != ci[n]]
        hinges = [max(0.0, margin + s[i, n] - s[ci[n], n]) for i in negs]
        t2i_terms.append(max(hinges) if hard else hinges)
    if hard:
        return np.mean(i2t_terms) + np.mean(t2i_terms)
    return np.mean(np.concatenate(i2t_terms)) + np.mean(np.concatenate(t2i_terms))


@pytest.mark.parametrize("hard", [True, False])
def test_triplet_equals_brute_force_multi_positive(hard):
    s, ci = batch(0)
    got, _ = losses.triplet_loss(s, ci, margin=0.2, hard_negative="max" if hard else "all")
    np.testing.assert_allclose(got, brute_triplet(s, ci, 0.2, hard), rtol=1e-5)


def test_vse0_sum_reduction_equals_brute_force_sum():
    s, ci = batch(1, 3, 2)
    got, _ = losses.triplet_loss(s, ci, margin=0.1, hard_negative="all", reduction="sum")
    ref = 0.0
    for n in range(6):
        i = ci[n]
        ref += sum(max(0, 0.1 + s[i, n2] - s[i, n]) for n2 in range(6) if ci[n2] != i)
        ref += sum(max(0, 0.1 + s[i2, n] - s[i, n]) for i2 in range(3) if i2 != i)
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_hardest_negative_ignores_same_image_captions():
    s, ci = batch(2)
    boosted = s.copy()
    for i in range(4):  # make the same-image captions of every image score extremely high
        boosted[i, ci == i] += 10.0
    # Positives only get better; no new violation may appear from same-image captions.
    _, parts = losses.triplet_loss(boosted, ci)
    assert float(parts["i2t"]) <= float(losses.triplet_loss(s, ci)[1]["i2t"]) + 1e-6
    single_high = s.copy(); single_high[0, 1] = 5.0  # caption 1 belongs to image 0: not a negative for it
    a = losses.triplet_loss(single_high, ci)[1]["i2t"]
    ref = brute_triplet(single_high, ci, 0.2, True)
    np.testing.assert_allclose(a + losses.triplet_loss(single_high, ci)[1]["t2i"], ref, rtol=1e-5)


def test_image_ids_make_duplicate_images_positives():
    s, ci = batch(3, 3, 2)
    ids = np.array([7, 7, 9])  # images 0 and 1 are the same picture
    got, _ = losses.triplet_loss(s, ci, image_ids=ids)
    s64 = s.astype(np.float64)
    i2t, t2i = [], []
    for n in range(6):
        i = ci[n]
        negs = [n2 for n2 in range(6) if ids[ci[n2]] != ids[i]]
        i2t.append(max(0, 0.2 + max(s64[i, negs]) - s64[i, n]))
        negi = [i2 for i2 in range(3) if ids[i2] != ids[i]]
        t2i.append(max(0, 0.2 + max(s64[negi, n]) - s64[i, n]))
    np.testing.assert_allclose(got, np.mean(i2t) + np.mean(t2i), rtol=1e-5)


def ref_infonce(s, ci, tau):
    z = s.astype(np.float64) / tau
    y = ci[None, :] == np.arange(s.shape[0])[:, None]
    i2t = -np.mean([np.log(np.exp(z[i][y[i]]).sum() / np.exp(z[i]).sum()) for i in range(s.shape[0])])
    t2i = -np.mean([np.log(np.exp(z[ci[n], n]) / np.exp(z[:, n]).sum()) for n in range(s.shape[1])])
    return 0.5 * (i2t + t2i)


def test_infonce_multi_positive_matches_float64_reference():
    s, ci = batch(4)
    got, _ = losses.infonce_loss(s, ci, temperature=0.05)
    np.testing.assert_allclose(got, ref_infonce(s, ci, 0.05), rtol=1e-5)


def test_infonce_one_caption_per_image_is_clip_loss():
    rng = np.random.default_rng(5)
    s = rng.normal(size=(6, 6)).astype(np.float32)
    got, _ = losses.infonce_loss(s, np.arange(6), temperature=0.1)
    logits = s.astype(np.float64) / 0.1
    ce = lambda l: -np.mean(np.diag(l) - np.log(np.exp(l).sum(1)))
    np.testing.assert_allclose(got, 0.5 * (ce(logits) + ce(logits.T)), rtol=1e-5)


def test_padded_examples_are_ignored():
    s, ci = batch(6, 4, 2)
    s_pad = np.concatenate([s, np.full((1, 8), 9.0, np.float32)], 0)
    s_pad = np.concatenate([s_pad, np.full((5, 2), 9.0, np.float32)], 1)
    ci_pad = np.concatenate([ci, [4, 4]])
    iv = np.array([1, 1, 1, 1, 0], bool); cv = np.array([1] * 8 + [0, 0], bool)
    for fn in (losses.triplet_loss, losses.infonce_loss):
        np.testing.assert_allclose(fn(s_pad, ci_pad, image_valid=iv, caption_valid=cv)[0], fn(s, ci)[0], rtol=1e-5)


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_div_uniformity_closed_forms():
    same = np.ones((3, 4, 8), np.float32)
    np.testing.assert_allclose(losses.div_uniformity(same), 1.0, rtol=1e-6)
    ortho = np.tile(np.eye(4, 8, dtype=np.float32)[None] * 3.0, (2, 1, 1))
    np.testing.assert_allclose(losses.div_uniformity(ortho), np.exp(-4.0), rtol=1e-5)
    rng = np.random.default_rng(0)
    r = rng.normal(size=(5, 4, 8)).astype(np.float32)
    rn = unit(r.astype(np.float64))
    ref = np.mean([np.mean([np.exp(-2 * np.sum((rn[s, j] - rn[s, k]) ** 2)) for j, k in itertools.combinations(
        range(4), 2)]) for s in range(5)])
    np.testing.assert_allclose(losses.div_uniformity(r), ref, rtol=1e-5)


def test_div_gram_closed_forms_and_reference():
    ortho = np.tile(np.eye(4, 8, dtype=np.float32)[None], (2, 1, 1))
    assert float(losses.div_gram(ortho)) < 1e-5
    g = jax.grad(lambda x: losses.div_gram(x))(jnp.asarray(ortho))
    assert np.all(np.isfinite(np.asarray(g)))
    r = np.random.default_rng(1).normal(size=(3, 4, 8)).astype(np.float32)
    rn = unit(r.astype(np.float64))
    gram = np.einsum("njd,nkd->njk", rn, rn) - np.eye(4)
    ref = np.mean(np.linalg.norm(gram, axis=(1, 2)) / 16)
    np.testing.assert_allclose(losses.div_gram(r), ref, rtol=1e-5)


def test_mmd_zero_for_repeated_elements_and_matches_reference():
    rng = np.random.default_rng(2)
    x = unit(rng.normal(size=(6, 8))).astype(np.float32)
    y = np.repeat(x, 5, axis=0)
    assert abs(float(losses.mmd_loss(x, y))) < 1e-5
    y2 = unit(rng.normal(size=(10, 8))).astype(np.float32)
    k = lambda a, b: np.exp(-0.5 * np.linalg.norm(a[:, None] - b[None], axis=-1))
    x64, y64 = x.astype(np.float64), y2.astype(np.float64)
    ref = k(x64, x64).mean() - 2 * k(x64, y64).mean() + k(y64, y64).mean()
    np.testing.assert_allclose(losses.mmd_loss(x, y2), ref, rtol=1e-4, atol=1e-6)


def test_mmd_gradient_finite_when_elements_coincide():
    x = jnp.ones((4, 8)) / np.sqrt(8)
    g = jax.grad(lambda a, b: losses.mmd_loss(a, b), (0, 1))(x, x)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in g)


def test_gd_isd_closed_forms_both_shapes():
    # Two elements at known angles to the global: cos = 1 and cos = 0.
    g = np.array([[1.0, 0, 0]], np.float32)
    e = np.array([[[1.0, 0, 0], [0, 1.0, 0]]], np.float32)
    np.testing.assert_allclose(losses.gd_loss(e, g, delta=0.6, shape="exp", scale=5.0),
                               0.5 * (np.exp(5 * 0.4) + np.exp(5 * -0.6)), rtol=1e-6)
    np.testing.assert_allclose(losses.gd_loss(e, g, delta=0.6, shape="hinge"), 0.5 * 0.4, rtol=1e-6)
    # ISD: pair cosines 0 (ordered pairs both directions).
    np.testing.assert_allclose(losses.isd_loss(e, delta=0.5, shape="exp", scale=5.0), np.exp(-2.5), rtol=1e-6)
    assert float(losses.isd_loss(e, delta=0.5, shape="hinge")) == 0.0


def test_gd_isd_small_for_spread_sets_large_for_collapsed():
    rng = np.random.default_rng(3)
    glob = unit(rng.normal(size=(8, 16))).astype(np.float32)
    spread = np.stack([unit(np.eye(16)[:4] + 0.0) for _ in range(8)]).astype(np.float32)
    collapsed = np.repeat(glob[:, None], 4, axis=1)
    for shape in ("exp", "hinge"):
        gd_s = float(losses.gd_loss(spread, glob, shape=shape)); gd_c = float(losses.gd_loss(collapsed, glob, shape=shape))
        isd_s = float(losses.isd_loss(spread, shape=shape)); isd_c = float(losses.isd_loss(collapsed, shape=shape))
        assert gd_c > 5 * max(gd_s, 1e-3) and isd_c > 5 * max(isd_s, 1e-3)
    assert float(losses.isd_loss(spread, shape="hinge")) == 0.0  # every pair cosine 0 < δ


def test_masked_elements_excluded_from_regularisers():
    rng = np.random.default_rng(4)
    e = unit(rng.normal(size=(3, 4, 8))).astype(np.float32)
    g = unit(rng.normal(size=(3, 8))).astype(np.float32)
    junk = np.concatenate([e, np.ones((3, 2, 8), np.float32)], 1)
    mask = np.arange(6)[None].repeat(3, 0) < 4
    for fn in (lambda x, m: losses.isd_loss(x, m), lambda x, m: losses.gd_loss(x, g, m),
               lambda x, m: losses.div_uniformity(x, m)):
        np.testing.assert_allclose(fn(junk, mask), fn(e, None), rtol=1e-6)


def test_objective_finite_and_differentiable_for_collapsed_sets():
    b, k, d = 3, 4, 8
    v = np.zeros((d,), np.float32); v[0] = 1
    collapsed = lambda n: {"set": jnp.tile(v, (n, k, 1)), "residual": jnp.zeros((n, k, d)),
                           "global": jnp.tile(v, (n, 1))}
    ci = np.repeat(np.arange(b), 5)

    def total(img_set, txt_set, img_res, txt_res):
        img = {"set": img_set, "residual": img_res, "global": jnp.tile(v, (b, 1))}
        txt = {"set": txt_set, "residual": txt_res, "global": jnp.tile(v, (5 * b, 1))}
        return losses.maxmatch_objective(img, txt, ci)[0]

    args = (collapsed(b)["set"], collapsed(5 * b)["set"], collapsed(b)["residual"], collapsed(5 * b)["residual"])
    for warmup in (False, True):
        val = losses.maxmatch_objective({"set": args[0], "residual": args[2], "global": jnp.tile(v, (b, 1))},
                                        {"set": args[1], "residual": args[3], "global": jnp.tile(v, (5 * b, 1))},
                                        ci, warmup=warmup)[0]
        assert np.isfinite(float(val))
    grads = jax.grad(total, argnums=(0, 1, 2, 3))(*args)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)


def _model_outputs(rng, n, k=4, d=8):
    """Random model outputs of one modality: unit set rows, residuals, unit global rows."""
    return {"set": unit(rng.normal(size=(n, k, d))).astype(np.float32),
            "residual": rng.normal(size=(n, k, d)).astype(np.float32),
            "global": unit(rng.normal(size=(n, d))).astype(np.float32)}


def test_objective_terms_and_config_errors():
    rng = np.random.default_rng(5)
    img, txt, ci = _model_outputs(rng, 3), _model_outputs(rng, 15), np.repeat(np.arange(3), 5)
    total, m = losses.maxmatch_objective(img, txt, ci)
    cfg = losses.maxmatch_loss_config()
    recomputed = (m["loss/triplet"] + cfg.lambda_con * m["loss/contrastive"] + cfg.lambda_gd * m["loss/gd"]
                  + cfg.lambda_isd * m["loss/isd"] + cfg.lambda_div * m["loss/div"] + cfg.lambda_mmd * m["loss/mmd"])
    np.testing.assert_allclose(total, recomputed, rtol=1e-6)
    setdiv = dict(similarity="smooth_chamfer", lambda_con=0.0, lambda_gd=0.0, lambda_isd=0.0)
    _, m2 = losses.maxmatch_objective(img, txt, ci, setdiv)
    assert "loss/gd" not in m2 and "loss/contrastive" not in m2
    with pytest.raises(ValueError, match="unknown loss config field"):
        losses.maxmatch_objective(img, txt, ci, {"lamda_gd": 1.0})
    with pytest.raises(ValueError, match="caption_image must have shape"):
        losses.triplet_loss(np.zeros((3, 15)), np.zeros(14, int))


def test_objective_reduction_sums_the_hardest_negative_triplet():
    """`loss.reduction='sum'` (VSE∞) sums the post-warm-up triplet terms; the default averages them."""
    rng = np.random.default_rng(6)
    mk = lambda n: {"set": unit(rng.normal(size=(n, 1, 8))).astype(np.float32),
                    "residual": np.zeros((n, 1, 8), np.float32), "global": unit(rng.normal(size=(n, 8)))}
    img, txt, ci = mk(3), mk(6), np.repeat(np.arange(3), 2)
    base = dict(similarity="average", lambda_con=0.0, lambda_gd=0.0, lambda_isd=0.0, lambda_div=0.0,
                lambda_mmd=0.0)
    s = np.einsum("id,nd->in", img["set"][:, 0], txt["set"][:, 0])
    i2t = [max(max(0.0, 0.2 + s[ci[n], n2] - s[ci[n], n]) for n2 in range(6) if ci[n2] != ci[n]) for n in range(6)]
    t2i = [max(max(0.0, 0.2 + s[i, n] - s[ci[n], n]) for i in range(3) if i != ci[n]) for n in range(6)]
    mean, _ = losses.maxmatch_objective(img, txt, ci, dict(base, reduction="mean"))
    total, _ = losses.maxmatch_objective(img, txt, ci, dict(base, reduction="sum"))
    np.testing.assert_allclose(mean, np.mean(i2t) + np.mean(t2i), rtol=1e-5)
    # the sum form sums each direction's hardest-negative hinge over its anchors
    _, parts = losses.triplet_loss(s, ci, margin=0.2, hard_negative="max", reduction="sum")
    np.testing.assert_allclose(total, parts["i2t"] + parts["t2i"], rtol=1e-5)
    assert float(total) > float(mean)


def test_similarity_options_are_derived_from_the_loss_and_matching_config():
    cfg = losses.maxmatch_loss_config()
    cfg.update(s_h=3.0, solver="auction", match_on="transformed", alpha=4.0)
    opts = losses.similarity_options(cfg, {"pad_penalty": 9.0, "auction": {"theta": 0.5},
                                           "sinkhorn": {"tau": 0.1, "iters": 7}})
    assert opts == {"s_h": 3.0, "match_on": "transformed", "solver": "auction", "alpha": 4.0,
                    "solver_options": {"pad_penalty": 9.0, "auction": {"theta": 0.5}},
                    "sinkhorn_tau": 0.1, "sinkhorn_iters": 7}


def test_objective_ramp_blends_all_and_hardest_negative_triplets():
    """During the hard-negative ramp L_tri = w·L_all + (1 − w)·L_max (w traced); w = 1 / 0 equal the two phases."""
    rng = np.random.default_rng(7)
    img, txt, ci = _model_outputs(rng, 4), _model_outputs(rng, 20), np.repeat(np.arange(4), 5)
    cfg = dict(similarity="smooth_chamfer", warmup_reduction="sum", reduction="mean")
    tri = lambda warmup: losses.maxmatch_objective(img, txt, ci, cfg, warmup=warmup)[1]["loss/triplet"]
    l_all, l_max = float(tri(True)), float(tri(False))
    assert abs(l_all - l_max) > 1e-3  # the two forms differ here, so the blend is a real check
    blended = jax.jit(lambda w: losses.maxmatch_objective(img, txt, ci, cfg, warmup=w)[1])
    for w in (0.0, 0.3, 1.0):
        m = blended(jnp.float32(w))
        np.testing.assert_allclose(m["loss/triplet"], w * l_all + (1 - w) * l_max, rtol=1e-5)
        np.testing.assert_allclose(m["loss/triplet_i2t"] + m["loss/triplet_t2i"], m["loss/triplet"], rtol=1e-5)
        assert float(m["loss/all_negative_weight"]) == pytest.approx(w)


def test_score_units_cosine_maps_exponential_scores_back_to_cosines():
    """`loss.score_units='cosine'`: g(S) = log(1 + s·S)/s undoes f_s on one matched cosine, is a log-mean-exp of
    several (between their mean and their max), leaves cosine-valued kinds alone, and the objective's ranking losses
    equal the native ones computed on g(S) (checked against a numpy recomputation of the hardest-negative triplet)."""
    from mmjax.losses.objective import cosine_units
    from mmjax.similarity import f_s, pairwise_set_similarity
    c = jnp.linspace(-0.9, 0.9, 7)
    for s in (0.5, 1.0, 5.0):
        np.testing.assert_allclose(cosine_units(f_s(c, s), "maxmatch", s), c, atol=1e-5)  # float32 round-off
    cos = np.array([0.1, 0.5, 0.8])
    lme = float(cosine_units(jnp.mean(f_s(jnp.asarray(cos), 2.0)), "maxmatch", 2.0))
    assert cos.mean() < lme < cos.max()
    assert cosine_units(jnp.float32(0.3), "smooth_chamfer", 1.0) == 0.3  # already cosine-valued
    assert np.isfinite(float(cosine_units(jnp.float32(-1e9), "maxmatch", 1.0)))  # a masked sentinel stays finite

    rng = np.random.default_rng(8)
    img, txt, ci = _model_outputs(rng, 3), _model_outputs(rng, 9), np.repeat(np.arange(3), 3)
    base = dict(similarity="maxmatch", s_h=1.0, lambda_con=0.0, lambda_gd=0.0, lambda_isd=0.0, lambda_div=0.0,
                lambda_mmd=0.0)
    _, native = losses.maxmatch_objective(img, txt, ci, base)
    _, cosine = losses.maxmatch_objective(img, txt, ci, dict(base, score_units="cosine"))
    g = np.log1p(np.asarray(pairwise_set_similarity(img["set"], txt["set"], "maxmatch", s_h=1.0), np.float64))
    i2t = np.mean([max(max(0.0, 0.2 + g[ci[n], m] - g[ci[n], n]) for m in range(9) if ci[m] != ci[n])
                   for n in range(9)])
    t2i = np.mean([max(max(0.0, 0.2 + g[i, n] - g[ci[n], n]) for i in range(3) if i != ci[n]) for n in range(9)])
    np.testing.assert_allclose(cosine["loss/triplet"], i2t + t2i, rtol=1e-5)
    assert abs(float(native["loss/triplet"]) - float(cosine["loss/triplet"])) > 1e-4
    with pytest.raises(ValueError, match="score_units"):
        losses.maxmatch_objective(img, txt, ci, dict(base, score_units="log"))
