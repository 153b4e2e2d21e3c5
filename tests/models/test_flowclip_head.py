"""FlowCLIPHead: parameter init (I, I, 0, 1/0.07), delegation to the pure scorer, logit-scale clipping."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.flowclip import FlowCLIPOptions, score_pair_reference
from mmjax.models.flowclip_head import FlowCLIPHead

D, N, L = 8, 5, 6


def _features(seed=0, bi=3, bt=4):
    rng = np.random.default_rng(seed)
    image = {"global": rng.normal(size=(bi, D)).astype(np.float32),
             "patches": rng.normal(size=(bi, N, D)).astype(np.float32)}
    valid = np.zeros((bt, L), bool)
    for t, n in enumerate([3, 1, 0, 5][:bt]):  # includes an empty valid set
        valid[t, 1:1 + n] = True
    text = {"global": rng.normal(size=(bt, D)).astype(np.float32),
            "tokens": rng.normal(size=(bt, L, D)).astype(np.float32), "valid": valid}
    return image, text


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_init_is_pretrained_cosine():
    image, text = _features()
    head = FlowCLIPHead(dim=D)
    variables = head.init(jax.random.PRNGKey(0), image, text)
    params = variables["params"]
    assert set(params) == {"M", "M_tok", "W", "log_logit_scale"}
    np.testing.assert_array_equal(params["M"], np.eye(D))
    np.testing.assert_array_equal(params["M_tok"], np.eye(D))
    np.testing.assert_array_equal(params["W"], np.zeros((D, D)))
    np.testing.assert_allclose(head.apply(variables, method="logit_scale"), 1 / 0.07, rtol=1e-6)
    scores = head.apply(variables, image, text)
    np.testing.assert_allclose(scores, _unit(image["global"]) @ _unit(text["global"]).T, atol=1e-6)


@pytest.mark.parametrize("alpha,tau_p", [(1.0, 0.02), (0.5, 0.1)])
def test_scores_match_algorithm_1_for_trained_params(alpha, tau_p):
    image, text = _features(1)
    rng = np.random.default_rng(2)
    params = {"M": np.eye(D) + 0.3 * rng.normal(size=(D, D)), "M_tok": np.eye(D) + 0.3 * rng.normal(size=(D, D)),
              "W": 0.5 * rng.normal(size=(D, D)), "log_logit_scale": np.float32(math.log(20.0))}
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    head = FlowCLIPHead(dim=D, options=FlowCLIPOptions(alpha=alpha, tau_p=tau_p, score_chunk_images=2))
    scores = np.asarray(jax.jit(head.apply)({"params": params}, image, text))
    scorer = {k: params[k] for k in ("M", "M_tok", "W")}
    for i in range(3):
        for t in range(4):
            ref = score_pair_reference(scorer, jax.tree.map(lambda x: x[i], image),
                                       jax.tree.map(lambda x: x[t], text), alpha=alpha, tau_p=tau_p)
            np.testing.assert_allclose(scores[i, t], ref, atol=1e-5)
    # Global-M ignores the local branch: equals v̂ · norm(M t̂) computed here in numpy.
    global_m = FlowCLIPHead(dim=D, options=FlowCLIPOptions(use_local=False)).apply(
        {"params": params}, image, {"global": text["global"]})
    m_t = _unit(_unit(text["global"]) @ np.asarray(params["M"]).T)
    np.testing.assert_allclose(global_m, _unit(image["global"]) @ m_t.T, atol=1e-5)


def test_logit_scale_is_clipped_with_zero_gradient_above_the_cap():
    head = FlowCLIPHead(dim=D)
    image, text = _features()
    params = head.init(jax.random.PRNGKey(0), image, text)["params"]

    def scale(theta):
        return head.apply({"params": {**params, "log_logit_scale": theta}}, method="logit_scale")

    np.testing.assert_allclose(scale(jnp.float32(math.log(500.0))), 100.0, rtol=1e-6)
    np.testing.assert_allclose(scale(jnp.float32(math.log(50.0))), 50.0, rtol=1e-6)
    assert jax.grad(scale)(jnp.float32(math.log(500.0))) == 0.0
    np.testing.assert_allclose(jax.grad(scale)(jnp.float32(math.log(50.0))), 50.0, rtol=1e-5)


def test_gradients_reach_m_and_w_at_init():
    image, text = _features(3)
    head = FlowCLIPHead(dim=D)
    params = head.init(jax.random.PRNGKey(0), image, text)["params"]
    grads = jax.grad(lambda p: head.apply({"params": p}, image, text).sum())(params)
    assert np.abs(grads["M"]).max() > 0 and np.abs(grads["W"]).max() > 0
    # ∂s/∂M_tok = 0 while W = 0 (docs/design.md#icer); the Gram form leaves float32 rounding of ~1e-8.
    np.testing.assert_allclose(grads["M_tok"], 0.0, atol=1e-6)


def test_return_local_splits_f1_and_options_have_one_default():
    """`return_local=True` gives (s, s_L) with s = s_G + α·s_L (what the objective logs and trains on); Global-M
    returns s_L None. The head's defaults are `FlowCLIPOptions()`'s, and a mapping with an unknown field is refused."""
    image, text = _features(4)
    alpha = 0.7
    head = FlowCLIPHead(dim=D, options=FlowCLIPOptions.from_mapping({"alpha": alpha}))
    params = head.init(jax.random.PRNGKey(0), image, text)["params"]
    params = {**params, "W": jnp.asarray(np.random.default_rng(5).normal(size=(D, D)), jnp.float32)}
    s, s_local = head.apply({"params": params}, image, text, return_local=True)
    s_global = FlowCLIPHead(dim=D, options=FlowCLIPOptions(use_local=False)).apply(
        {"params": params}, image, text, return_local=True)
    assert s_global[1] is None
    np.testing.assert_allclose(s, s_global[0] + alpha * s_local, atol=1e-6)
    assert np.abs(np.asarray(s_local)).max() > 1e-4  # W ≠ 0: the local term is really there
    assert FlowCLIPHead(dim=D).options == FlowCLIPOptions()
    with pytest.raises(TypeError, match="unknown flowclip option"):
        FlowCLIPOptions.from_mapping({"alpha": 1.0, "tau": 0.1})


@pytest.mark.parametrize("use_local,lambda_cimr", [(True, 0.1), (True, 0.0), (False, 0.1)])
def test_head_objective_is_the_objective_on_the_heads_scores_and_clipped_scale(use_local, lambda_cimr):
    """`head_objective` = `flowclip_objective` on the pure scorer `score_pairs` with the head's options and the
    logit scale exp(min(θ, log max)) computed here; θ above the cap, trained M/M_tok/W, λ_CIMR from the head."""
    from mmjax.flowclip import flowclip_objective, score_pairs
    from mmjax.models.flowclip_head import head_objective

    image, pos = _features(6, bi=4, bt=4)
    _, neg = _features(7, bi=4, bt=4)
    batch = {"image": image, "pos_text": pos, "neg_text": neg, "image_ids": np.array([0, 1, 1, 2]),
             "neg_valid": np.array([True, True, False, True])}
    options = FlowCLIPOptions(use_local=use_local, lambda_cimr=lambda_cimr, alpha=0.8)
    head = FlowCLIPHead(dim=D, options=options)
    rng = np.random.default_rng(8)
    params = {k: jnp.asarray(np.eye(D) * (k != "W") + 0.3 * rng.normal(size=(D, D)), jnp.float32)
              for k in ("M", "M_tok", "W")}
    params["log_logit_scale"] = jnp.float32(math.log(500.0))  # above the cap of 100
    key = jax.random.PRNGKey(9)

    loss, metrics = jax.jit(head_objective, static_argnums=0)(head, params, batch, key)
    scorer = {k: params[k] for k in ("M", "M_tok", "W")}
    ref_loss, ref_metrics = flowclip_objective(
        lambda i, t: score_pairs(scorer, i, t, return_local=True, **options.score_kwargs()),
        np.float32(min(500.0, options.logit_scale_max)), batch, key, options)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    assert set(metrics) == set(ref_metrics)
    assert ("cimr" in metrics) == (lambda_cimr != 0) and ("mean_abs_s_local" in metrics) == use_local
    np.testing.assert_allclose(metrics["logit_scale"], 100.0, rtol=1e-6)
    for k in ref_metrics:
        np.testing.assert_allclose(metrics[k], ref_metrics[k], rtol=1e-5, atol=1e-7, err_msg=k)
