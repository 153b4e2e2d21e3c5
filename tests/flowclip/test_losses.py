"""HNB, CIMR, donors and the Flow-CLIP objective (docs/design.md#flowclip-losses, docs/design.md#testing) against
float64 numpy oracles."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mmjax.flowclip as fc
from mmjax.flowclip.donors import cyclic_derangement

SCALE = 1 / 0.07


def random_scores(seed, b):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (b, b)).astype(np.float32), rng.uniform(-1, 1, (b, b)).astype(np.float32)


def numpy_log_softmax(x, axis):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def labclip_loss(pos, neg, scale):
    """LABCLIP `constrastive_loss_with_negatives`: I2T CE over B×2B with diagonal target; T2I CE over the first B
    columns; averaged."""
    logits = scale * np.concatenate([pos, neg], 1).astype(np.float64)
    b = pos.shape[0]
    i2t = -numpy_log_softmax(logits, 1)[np.arange(b), np.arange(b)].mean()
    t2i = -numpy_log_softmax(logits.T[:b], 1)[np.arange(b), np.arange(b)].mean()
    return (i2t + t2i) / 2


def hnb_float64(pos, neg, ids, neg_valid, scale):
    """Spec §5.1 written out with explicit sums in float64."""
    u_pos, u_neg = scale * pos.astype(np.float64), scale * neg.astype(np.float64)
    b = len(ids)
    i2t = t2i = 0.0
    for i in range(b):
        y = ids == ids[i]
        num = np.exp(u_pos[i][y]).sum()
        den = np.exp(u_pos[i]).sum() + np.exp(u_neg[i][neg_valid]).sum()
        i2t -= np.log(num / den)
        t2i -= np.log(np.exp(u_pos[:, i][y]).sum() / np.exp(u_pos[:, i]).sum())
    return (i2t + t2i) / (2 * b)


def test_hnb_equals_labclip_when_ids_unique_and_negatives_valid():
    pos, neg = random_scores(0, 6)
    got = fc.hnb_loss(pos, neg, np.arange(6), np.ones(6, bool), SCALE)
    np.testing.assert_allclose(got, labclip_loss(pos, neg, SCALE), rtol=1e-5)


def test_hnb_multi_positive_matches_float64_reference_and_is_permutation_invariant():
    pos, neg = random_scores(1, 7)
    ids = np.array([3, 1, 3, 0, 1, 3, 2])
    neg_valid = np.array([1, 0, 1, 1, 0, 1, 1], bool)
    got = fc.hnb_loss(pos, neg, ids, neg_valid, SCALE)
    np.testing.assert_allclose(got, hnb_float64(pos, neg, ids, neg_valid, SCALE), rtol=1e-5)
    assert abs(float(got) - labclip_loss(pos, neg, SCALE)) > 1e-3  # multi-positive counting matters here
    perm = np.random.default_rng(2).permutation(7)
    permuted = fc.hnb_loss(pos[perm][:, perm], neg[perm][:, perm], ids[perm], neg_valid[perm], SCALE)
    np.testing.assert_allclose(permuted, got, rtol=1e-6)


def test_hnb_same_image_captions_are_positives():
    # All records show one image and no negative is valid: every caption is a positive of every row, so both
    # directions have numerator = denominator and the loss is exactly 0.
    pos, neg = random_scores(3, 4)
    np.testing.assert_allclose(fc.hnb_loss(pos, neg, np.zeros(4, int), np.zeros(4, bool), SCALE), 0.0, atol=1e-6)


def test_hnb_invalid_negative_scores_change_nothing():
    pos, neg = random_scores(4, 5)
    ids, neg_valid = np.arange(5), np.array([1, 0, 1, 0, 1], bool)
    base = fc.hnb_loss(pos, neg, ids, neg_valid, SCALE)
    neg2 = neg.copy()
    neg2[:, ~neg_valid] = 1e6  # a huge score on an invalid negative must not leak (finite penalty masking)
    np.testing.assert_array_equal(fc.hnb_loss(pos, neg2, ids, neg_valid, SCALE), base)
    grads = jax.grad(fc.hnb_loss, argnums=1)(pos, neg2, ids, neg_valid, SCALE)
    np.testing.assert_array_equal(np.asarray(grads)[:, ~neg_valid], 0.0)


def cimr_float64(pos, neg, ids, neg_valid, donor, kappa):
    terms = []
    for i in range(len(ids)):
        if neg_valid[i] and ids[donor[i]] != ids[i]:
            m_own = float(pos[i, i]) - float(neg[i, i])
            m_donor = float(pos[donor[i], i]) - float(neg[donor[i], i])
            terms.append(np.log1p(np.exp(-kappa * (m_own - m_donor))))
    return np.mean(terms) if terms else 0.0


def test_cimr_matches_float64_and_is_invariant_to_text_and_image_only_terms():
    b = 8
    pos, neg = random_scores(5, b)
    ids = np.array([0, 1, 1, 2, 3, 3, 4, 5])
    neg_valid = np.array([1, 1, 0, 1, 1, 1, 1, 0], bool)
    donor, _ = fc.choose_donors(jax.random.key(0), ids)
    got = fc.cimr_loss(pos, neg, ids, neg_valid, donor, 3.0)
    np.testing.assert_allclose(got, cimr_float64(pos, neg, ids, neg_valid, np.asarray(donor), 3.0), rtol=1e-5)
    rng = np.random.default_rng(6)
    f_pos, f_neg, g_img = (rng.normal(size=b).astype(np.float32) for _ in range(3))  # f(T⁺), f(T⁻), g(I)
    shifted = fc.cimr_loss(pos + f_pos[None] + g_img[:, None], neg + f_neg[None] + g_img[:, None], ids, neg_valid,
                           donor, 3.0)
    np.testing.assert_allclose(shifted, got, rtol=1e-5, atol=1e-6)
    pair_term = rng.normal(size=(b, b)).astype(np.float32)  # depends on (image, caption): must change CIMR
    assert abs(float(got) - float(fc.cimr_loss(pos + pair_term, neg, ids, neg_valid, donor, 3.0))) > 1e-3


def test_cimr_empty_eligible_set_is_zero_without_nan():
    pos, neg = random_scores(7, 4)
    for ids, neg_valid in ((np.zeros(4, int), np.ones(4, bool)), (np.arange(4), np.zeros(4, bool))):
        donor, eligible = fc.choose_donors(jax.random.key(1), ids)
        value, grads = jax.value_and_grad(fc.cimr_loss, argnums=(0, 1))(pos, neg, ids, neg_valid, donor, SCALE)
        assert float(value) == 0.0
        assert all(np.isfinite(np.asarray(g)).all() and not np.asarray(g).any() for g in grads)
    assert not np.asarray(fc.choose_donors(jax.random.key(1), np.zeros(4, int))[1]).any()


def test_donors_differ_in_identity_and_are_deterministic():
    ids = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3])
    for seed in range(20):
        donor, eligible = map(np.asarray, fc.choose_donors(jax.random.key(seed), ids))
        assert (ids[donor][eligible] != ids[eligible]).all()
        assert (donor[~eligible] == np.arange(10)[~eligible]).all()
        again = fc.choose_donors(jax.random.key(seed), ids)
        np.testing.assert_array_equal(again[0], donor)
    perm = np.asarray(cyclic_derangement(jax.random.key(3), 9))
    seen, k = {0}, 0
    for _ in range(8):  # a single 9-cycle: following π from 0 visits every index before returning
        k = perm[k]
        assert k not in seen
        seen.add(k)
    assert perm[k] == 0
    assert np.asarray(jax.jit(fc.choose_donors)(jax.random.key(0), ids)[1]).all()  # jittable; 4 tries suffice


def batch_inputs(seed, b=6, l_tok=4, n=5, d=8):
    rng = np.random.default_rng(seed)

    def text():
        valid = rng.random((b, l_tok)) < 0.7
        return {"global": rng.normal(size=(b, d)).astype(np.float32),
                "tokens": rng.normal(size=(b, l_tok, d)).astype(np.float32), "valid": valid}

    return {"image": {"global": rng.normal(size=(b, d)).astype(np.float32),
                      "patches": rng.normal(size=(b, n, d)).astype(np.float32)},
            "pos_text": text(), "neg_text": text(), "image_ids": np.array([0, 1, 1, 2, 3, 4]),
            "neg_valid": np.array([1, 1, 1, 0, 1, 1], bool)}


def head_params(d=8, seed=0):
    rng = np.random.default_rng(seed + 50)
    return {"M": jnp.eye(d) + 0.2 * rng.normal(size=(d, d)), "M_tok": jnp.eye(d) + 0.2 * rng.normal(size=(d, d)),
            "W": jnp.asarray(rng.normal(size=(d, d)) / np.sqrt(d))}


def scorer(params, **options):
    """The score function the objective takes: F1 with its local term (`score_pairs(..., return_local=True)`)."""
    return functools.partial(fc.score_pairs, params, return_local=True, **options)


def test_objective_matches_explicit_rescoring():
    batch, params, rng = batch_inputs(0), head_params(), jax.random.key(5)
    loss, metrics = jax.jit(lambda p, s, b, r: fc.flowclip_objective(scorer(p), s, b, r))(params, SCALE, batch, rng)
    b, img = 6, batch["image"]
    ref = lambda i, txt, t: fc.score_pair_reference(  # noqa: E731
        params, {k: v[i] for k, v in img.items()}, {k: v[t] for k, v in txt.items()})
    pos = np.array([[ref(i, batch["pos_text"], t) for t in range(b)] for i in range(b)])
    neg = np.array([[ref(i, batch["neg_text"], t) for t in range(b)] for i in range(b)])
    donor, _ = fc.choose_donors(jax.random.fold_in(rng, fc.DONOR_TAG), batch["image_ids"])
    hnb = hnb_float64(pos, neg, batch["image_ids"], batch["neg_valid"], SCALE)
    cimr = cimr_float64(pos, neg, batch["image_ids"], batch["neg_valid"], np.asarray(donor), SCALE)
    np.testing.assert_allclose(metrics["hnb"], hnb, rtol=1e-4)
    np.testing.assert_allclose(metrics["cimr"], cimr, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(loss, hnb + 0.1 * cimr, rtol=1e-4)


def test_global_m_objective_is_labclip_head():
    batch, params = batch_inputs(1), head_params(seed=1)
    batch["image_ids"], batch["neg_valid"] = np.arange(6), np.ones(6, bool)
    loss, metrics = fc.flowclip_objective(scorer({"M": params["M"]}, use_local=False), SCALE, batch,
                                          options={"lambda_cimr": 0})
    assert "mean_abs_s_local" not in metrics  # Global-M has no local branch: nothing to log
    texts = {k: np.concatenate([batch["pos_text"][k], batch["neg_text"][k]]) for k in ("global",)}
    s = np.asarray(fc.global_m_score(params, batch["image"], texts))
    np.testing.assert_allclose(loss, labclip_loss(s[:, :6], s[:, 6:], SCALE), rtol=1e-5)


def test_cimr_kappa_stop_gradient():
    batch, params, rng = batch_inputs(2), head_params(seed=2), jax.random.key(0)

    def dscale(**cfg):
        return jax.grad(lambda sc: fc.flowclip_objective(scorer(params), sc, batch, rng, **cfg)[0])(
            jnp.float32(SCALE))

    hnb_only = dscale(lambda_cimr=0.0)
    np.testing.assert_allclose(dscale(), hnb_only, rtol=1e-6)  # default: κ under stop_gradient
    assert abs(float(dscale(cimr_kappa_stop_grad=False)) - float(hnb_only)) > 1e-7


def test_objective_config_errors():
    batch, params = batch_inputs(3), head_params()
    with pytest.raises(TypeError, match="unknown flowclip option"):
        fc.flowclip_objective(scorer(params), SCALE, batch, jax.random.key(0), lambda_cmir=0.1)
    with pytest.raises(ValueError, match="flowclip.pool"):
        fc.flowclip_objective(scorer(params), SCALE, batch, jax.random.key(0), pool="max")
    with pytest.raises(ValueError, match="needs rng"):
        fc.flowclip_objective(scorer(params), SCALE, batch, None)
    with pytest.raises(ValueError, match="shape"):  # a score function that does not score B × 2B
        fc.flowclip_objective(lambda i, t: (jnp.zeros((6, 6)), None), SCALE, batch, jax.random.key(0))
    # Every flowclip.* field is an option (scoring and head fields are accepted, and belong to score_fn).
    fc.flowclip_objective(scorer(params), SCALE, batch, jax.random.key(0),
                          options={"logit_scale_init": 14.3, "alpha": 0.5})


def test_loss_shape_errors():
    pos, neg = random_scores(0, 4)
    with pytest.raises(ValueError, match="neg_scores"):
        fc.hnb_loss(pos, neg[:3], np.arange(4), np.ones(4, bool), SCALE)
    with pytest.raises(ValueError, match="image_ids"):
        fc.hnb_loss(pos, neg, np.arange(5), np.ones(4, bool), SCALE)
    with pytest.raises(TypeError, match="neg_valid must be bool"):
        fc.hnb_loss(pos, neg, np.arange(4), np.ones(4, int), SCALE)
    with pytest.raises(ValueError, match="donor"):
        fc.cimr_loss(pos, neg, np.arange(4), np.ones(4, bool), np.zeros(3, int), 1.0)
