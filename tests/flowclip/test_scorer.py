"""Flow-CLIP scorer: properties of docs/design.md#testing and equivalence of the all-pairs forms with Algorithm 1."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mmjax.flowclip as fc
from mmjax.flowclip import scorer

TAU = 0.02


def make_inputs(seed, bi, bt, l_tok, n, d, *, p_valid=0.6, empty_rows=(), raw_scale=3.0):
    rng = np.random.default_rng(seed)
    image = {"global": raw_scale * rng.normal(size=(bi, d)).astype(np.float32),
             "patches": raw_scale * rng.normal(size=(bi, n, d)).astype(np.float32)}
    valid = rng.random((bt, l_tok)) < p_valid
    valid[:, 0] |= True  # at least one valid token per caption unless emptied below
    for t in empty_rows:
        valid[t] = False
    tokens = raw_scale * rng.normal(size=(bt, l_tok, d)).astype(np.float32)
    tokens[~valid] = 0.0  # padding rows are zero, as in real caches
    text = {"global": raw_scale * rng.normal(size=(bt, d)).astype(np.float32), "tokens": tokens, "valid": valid}
    return image, text


def random_params(seed, d, w_scale=1.0):
    rng = np.random.default_rng(seed + 1000)
    m = np.eye(d) + 0.3 * rng.normal(size=(d, d))
    m_tok = np.eye(d) + 0.3 * rng.normal(size=(d, d))
    w = w_scale * rng.normal(size=(d, d)) / np.sqrt(d)
    return {k: jnp.asarray(v, jnp.float32) for k, v in {"M": m, "M_tok": m_tok, "W": w}.items()}


def pair(image, text, i, t):
    return {k: v[i] for k, v in image.items()}, {k: v[t] for k, v in text.items()}


def numpy_algorithm1(params, image, text, alpha, tau):
    """Independent float64 numpy oracle of Algorithm 1 for all pairs (no library code)."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    lse = lambda x: x.max(-1) + np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1))  # noqa: E731
    v = unit(np.asarray(image["global"], np.float64))
    t = unit(unit(np.asarray(text["global"], np.float64)) @ p["M"].T)
    out = v @ t.T
    for i in range(out.shape[0]):
        ph = unit(np.asarray(image["patches"][i], np.float64))
        n = ph.shape[0]
        for j in range(out.shape[1]):
            sel = np.asarray(text["valid"][j])
            if not sel.any():
                continue
            q = unit(unit(np.asarray(text["tokens"][j][sel], np.float64)) @ p["M_tok"].T)
            a = q @ ph.T
            e = np.maximum(a - a.mean(1, keepdims=True), 0)
            c = e @ ph / n
            r = c - (c * q).sum(1, keepdims=True) * q
            qr = unit(q + r @ p["W"].T)
            delta = tau * lse(qr @ ph.T / tau) - tau * lse(a / tau)
            out[i, j] += alpha * delta.mean()
    return out


SHAPES = [  # (bi, bt, L, N, d, chunk, empty caption rows)
    (3, 4, 5, 7, 8, 2, (1,)),
    (5, 3, 4, 1, 6, 3, (2,)),  # N = 1
    (2, 5, 1, 9, 4, 32, (0, 3)),  # L = 1, chunk > Bi
    (4, 2, 6, 5, 8, 4, ()),
]


ALPHA = 0.7


@functools.lru_cache(maxsize=None)
def oracle(shape_index):
    """Inputs plus Algorithm-1 oracles: float64 numpy values, and `score_pair_reference` values and weighted
    parameter gradients accumulated pair by pair."""
    bi, bt, l_tok, n, d, chunk, empty = SHAPES[shape_index]
    image, text = make_inputs(shape_index, bi, bt, l_tok, n, d, empty_rows=empty)
    params = random_params(shape_index, d, w_scale=2.0)
    weights = np.random.default_rng(7).normal(size=(bi, bt)).astype(np.float32)

    # V_T is selected on the host so the literal oracle can be jitted (one compile per distinct |V_T|).
    @jax.jit
    def ref_one(p, v, patches, t_global, tokens_sel):
        valid = np.ones(tokens_sel.shape[0], bool)
        return fc.score_pair_reference(p, {"global": v, "patches": patches},
                                       {"global": t_global, "tokens": tokens_sel, "valid": valid},
                                       alpha=ALPHA, tau_p=TAU)

    ref_value_and_grad = jax.jit(jax.value_and_grad(ref_one))
    values = np.zeros((bi, bt), np.float32)
    grads = {k: np.zeros((d, d), np.float64) for k in params}
    for i in range(bi):
        for t in range(bt):
            tokens_sel = text["tokens"][t][text["valid"][t]]
            value, grad = ref_value_and_grad(params, image["global"][i], image["patches"][i], text["global"][t],
                                             tokens_sel)
            values[i, t] = value
            for k in grads:
                grads[k] += weights[i, t] * np.asarray(grad[k], np.float64)
    # The literal (unjitted, boolean-indexed) oracle on one pair, to keep the jitted wrapper honest.
    eager = fc.score_pair_reference(params, *pair(image, text, bi - 1, bt - 1), alpha=ALPHA, tau_p=TAU)
    np.testing.assert_allclose(eager, values[bi - 1, bt - 1], atol=1e-6)
    numpy_values = numpy_algorithm1(params, image, text, ALPHA, TAU)
    return image, text, params, weights, values, grads, numpy_values


@pytest.mark.slow  # 12 cases, ~60 s together on the shared 2-core CPU (jit compiles dominate)
@pytest.mark.parametrize("method", ["gram", "direct", "reference"])
@pytest.mark.parametrize("shape_index", range(len(SHAPES)))
def test_all_pairs_equal_algorithm1_values_and_gradients(method, shape_index):
    image, text, params, weights, ref_values, ref_grads, numpy_values = oracle(shape_index)
    chunk = SHAPES[shape_index][5]
    score = jax.jit(functools.partial(fc.score_pairs, alpha=ALPHA, tau_p=TAU, method=method, chunk_size=chunk))
    got = np.asarray(score(params, image, text))
    np.testing.assert_allclose(got, numpy_values, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got, ref_values, atol=1e-5, rtol=0)
    grad_all = jax.grad(lambda p: jnp.sum(weights * score(p, image, text)))(params)
    for k in ("M", "M_tok", "W"):
        assert np.isfinite(np.asarray(grad_all[k])).all()
        if SHAPES[shape_index][3] > 1 or k == "M":  # N = 1 has Δ ≡ 0, hence zero local gradients
            assert np.abs(ref_grads[k]).max() > 1e-3, k  # the comparison is not vacuous
        np.testing.assert_allclose(grad_all[k], ref_grads[k], atol=1e-5, rtol=1e-4, err_msg=k)


@pytest.mark.parametrize("method", ["gram", "direct"])
def test_w_zero_or_alpha_zero_is_exactly_global_m(method):
    image, text = make_inputs(1, 4, 3, 5, 6, 8, empty_rows=(1,))
    params = random_params(1, 8)
    s_global = np.asarray(fc.global_m_score(params, image, text))
    zero_w = dict(params, W=jnp.zeros_like(params["W"]))
    np.testing.assert_array_equal(fc.score_pairs(zero_w, image, text, alpha=1.0, tau_p=TAU, method=method), s_global)
    np.testing.assert_array_equal(fc.score_pairs(params, image, text, alpha=0.0, tau_p=TAU, method=method), s_global)
    np.testing.assert_array_equal(fc.score_pairs(params, image, text, use_local=False), s_global)


def test_identity_init_gives_plain_cosine():
    image, text = make_inputs(2, 3, 4, 5, 6, 8)
    params = fc.init_params(8)
    assert set(params) == {"M", "M_tok", "W"} and not np.asarray(params["W"]).any()
    v, t = image["global"], text["global"]
    cos = (v / np.linalg.norm(v, axis=1, keepdims=True)) @ (t / np.linalg.norm(t, axis=1, keepdims=True)).T
    np.testing.assert_allclose(fc.score_pairs(params, image, text, alpha=1.0, tau_p=TAU), cos, atol=1e-6)
    ref = fc.score_pair_reference(params, *pair(image, text, 1, 2), alpha=1.0, tau_p=TAU)
    np.testing.assert_allclose(ref, cos[1, 2], atol=1e-6)


def test_gradients_at_init_mtok_zero_w_nonzero():
    image, text = make_inputs(3, 3, 4, 5, 6, 8)
    params = fc.init_params(8)
    grads = jax.grad(lambda p: jnp.sum(fc.score_pairs(p, image, text, alpha=1.0, tau_p=TAU) ** 2))(params)
    # Zero in exact arithmetic (Δ ≡ 0 for every M_tok while W = 0); XLA fusion leaves ~1e-8 round-off.
    assert np.abs(np.asarray(grads["M_tok"])).max() < 1e-6
    assert np.abs(np.asarray(grads["W"])).max() > 1e-2
    assert np.abs(np.asarray(grads["M"])).max() > 1e-4


def test_uniform_patch_responses_give_zero_context():
    rng = np.random.default_rng(4)
    d, n = 8, 6
    params = random_params(4, d, w_scale=3.0)
    queries = scorer.token_queries(params, jnp.asarray(rng.normal(size=(5, d)), jnp.float32))
    same = jnp.tile(scorer.safe_normalize(jnp.asarray(rng.normal(size=(1, d)), jnp.float32)), (n, 1))
    terms = scorer.icer_token_terms(params, same, queries, tau_p=TAU)
    np.testing.assert_allclose(terms["e"], 0.0, atol=1e-6)
    np.testing.assert_allclose(terms["c"], 0.0, atol=1e-6)
    np.testing.assert_allclose(terms["delta"], 0.0, atol=1e-6)
    # a_ℓj constant in j without identical patches: patches orthogonal to every query respond with a = 0.
    basis = np.linalg.qr(rng.normal(size=(d, d)))[0]
    q_sub = jnp.asarray(basis[:, :2].T, jnp.float32)  # two unit queries
    ortho = scorer.safe_normalize(jnp.asarray(rng.normal(size=(n, d - 2)) @ basis[:, 2:].T, jnp.float32))
    terms = scorer.icer_token_terms(params, ortho, q_sub, tau_p=TAU)
    np.testing.assert_allclose(terms["e"], 0.0, atol=1e-6)
    np.testing.assert_allclose(terms["delta"], 0.0, atol=1e-6)


def test_weights_invariant_to_common_offset():
    a = jnp.asarray(np.random.default_rng(5).normal(size=(4, 9)), jnp.float32)
    offset = jnp.asarray([[0.5], [-2.0], [3.0], [0.0]], jnp.float32)
    np.testing.assert_allclose(scorer.positive_centered_weights(a + offset), scorer.positive_centered_weights(a),
                               atol=1e-6)


def test_tangent_projection_unit_query_and_bounds():
    rng = np.random.default_rng(6)
    d, n = 16, 11
    params = random_params(6, d, w_scale=5.0)
    for _ in range(3):
        patches = scorer.safe_normalize(jnp.asarray(rng.normal(size=(n, d)), jnp.float32))
        queries = scorer.token_queries(params, jnp.asarray(rng.normal(size=(7, d)), jnp.float32))
        terms = scorer.icer_token_terms(params, patches, queries, tau_p=TAU)
        assert np.abs(np.sum(np.asarray(terms["q"]) * np.asarray(terms["r"]), -1)).max() < 1e-6
        np.testing.assert_allclose(np.linalg.norm(terms["q_res"], axis=-1), 1.0, atol=1e-6)
        assert np.abs(np.asarray(terms["delta"])).max() > 1e-3  # nontrivial W
    image, text = make_inputs(6, 4, 5, 6, n, d)
    s_local = np.asarray(fc.icer_local_score(params, image, text, tau_p=TAU))
    assert np.abs(s_local).max() <= 2 + TAU * np.log(n)
    s_global = np.asarray(fc.global_m_score(params, image, text))
    assert np.abs(s_global).max() <= 1 + 1e-6


def test_logsumexp_and_logmeanexp_pool_agree():
    image, text = make_inputs(7, 3, 4, 5, 9, 8)
    params = random_params(7, 8, w_scale=2.0)
    for method in ("gram", "direct", "reference"):
        a = fc.score_pairs(params, image, text, tau_p=TAU, pool="logsumexp", method=method)
        b = fc.score_pairs(params, image, text, tau_p=TAU, pool="logmeanexp", method=method)
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_empty_and_masked_tokens():
    image, text = make_inputs(8, 3, 4, 5, 6, 8, empty_rows=(2,))
    params = random_params(8, 8, w_scale=2.0)

    def loss_and_grads(txt):
        f = lambda p: jnp.sum(jnp.sin(fc.score_pairs(p, image, txt, tau_p=TAU, chunk_size=2)))  # noqa: E731
        return fc.score_pairs(params, image, txt, tau_p=TAU, chunk_size=2), jax.grad(f)(params)

    s, g = loss_and_grads(text)
    s_local = fc.icer_local_score(params, image, text, tau_p=TAU)
    np.testing.assert_array_equal(np.asarray(s_local)[:, 2], 0.0)
    assert all(np.isfinite(np.asarray(v)).all() for v in g.values())
    # Rewriting rows outside V_T (random values, zeros, huge values) changes neither scores nor gradients.
    rng = np.random.default_rng(9)
    for filler in (rng.normal(size=text["tokens"].shape) * 10, np.zeros(text["tokens"].shape), 1e30):
        tokens = np.where(text["valid"][..., None], text["tokens"], filler).astype(np.float32)
        s2, g2 = loss_and_grads(dict(text, tokens=tokens))
        np.testing.assert_array_equal(s2, s)
        for k in g:
            np.testing.assert_array_equal(g2[k], g[k])


def test_queries_do_not_depend_on_the_image():
    image, text = make_inputs(10, 2, 1, 5, 6, 8)
    params = random_params(10, 8, w_scale=2.0)
    queries = scorer.token_queries(params, jnp.asarray(text["tokens"][0][text["valid"][0]]))
    terms = [scorer.icer_token_terms(params, scorer.safe_normalize(jnp.asarray(image["patches"][i])), queries,
                                     tau_p=TAU) for i in range(2)]
    np.testing.assert_array_equal(terms[0]["q"], terms[1]["q"])
    assert np.abs(np.asarray(terms[0]["r"] - terms[1]["r"])).max() > 1e-4  # only the context depends on I
    # In the all-pairs scorer, caption t's scores do not change when other captions are dropped.
    full = fc.score_pairs(params, image, make_inputs(10, 2, 3, 5, 6, 8)[1], tau_p=TAU)
    sub_text = {k: v[1:2] for k, v in make_inputs(10, 2, 3, 5, 6, 8)[1].items()}
    np.testing.assert_allclose(fc.score_pairs(params, image, sub_text, tau_p=TAU)[:, 0], full[:, 1], atol=1e-6)


def test_init_params_rejects_bad_d():
    with pytest.raises(ValueError, match="d must be a positive integer"):
        fc.init_params(0)
