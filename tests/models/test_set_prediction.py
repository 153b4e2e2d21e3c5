"""Set prediction module (docs/design.md#set-prediction-module, docs/design.md#testing) against a float64 numpy
reference."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from mmjax.models.set_prediction import (SetPredictionModule, sine_positional_encoding_1d,
                                         slot_competition_weights)

B, N, D_IN, D, K, L, H, DH = 3, 7, 6, 8, 4, 2, 2, 4


# ---------------------------------------------------------------- numpy reference (float64)
def np_layer_norm(x, p, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def np_slot_attention(slots, keys, values, mask, p, heads, head_dim):
    """Set Div `Attention.forward`: softmax over slots, mask after it, renormalise over tokens (+1e-7)."""
    q = (slots @ p["to_q"]["kernel"]).reshape(slots.shape[0], slots.shape[1], heads, head_dim)
    k = (keys @ p["to_k"]["kernel"]).reshape(keys.shape[0], keys.shape[1], heads, head_dim)
    v = (values @ p["to_v"]["kernel"]).reshape(values.shape[0], values.shape[1], heads, head_dim)
    batch, num_slots, num_tokens = slots.shape[0], slots.shape[1], keys.shape[1]
    slot_probs = np.zeros((batch, heads, num_slots, num_tokens))
    for b in range(batch):
        for h in range(heads):
            for j in range(num_tokens):
                logit = np.array([q[b, s, h] @ k[b, j, h] for s in range(num_slots)]) / math.sqrt(head_dim)
                e = np.exp(logit - logit.max())
                slot_probs[b, h, :, j] = e / e.sum() * (1.0 if mask is None else float(mask[b, j]))
    weights = slot_probs / (slot_probs.sum(-1, keepdims=True) + 1e-7)
    out = np.einsum("bhkn,bnhd->bkhd", weights, v).reshape(batch, num_slots, heads * head_dim)
    return out @ p["to_out"]["kernel"] + p["to_out"]["bias"], slot_probs, weights


def np_spm(params, tokens, mask, global_feat, depth, shared, heads, head_dim, sine_pe):
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    batch, num_tokens, d_in = tokens.shape
    slots = np.broadcast_to(p["queries"], (batch,) + p["queries"].shape).copy()
    pe = np_sine_pe(num_tokens, d_in) if sine_pe else 0.0
    maps = []
    for layer in range(depth):
        bp = p["block"] if shared else p[f"block_{layer}"]
        normed = np_layer_norm(tokens, bp["ln_tokens"])
        upd, _, w = np_slot_attention(np_layer_norm(slots, bp["ln_slots"]), normed + pe, normed, mask,
                                      bp["attn"], heads, head_dim)
        slots = slots + upd
        hid = np_layer_norm(slots, bp["ln_ffn"]) @ bp["ffn"]["fc1"]["kernel"] + bp["ffn"]["fc1"]["bias"]
        hid = 0.5 * hid * (1 + erf(hid / np.sqrt(2)))
        slots = slots + hid @ bp["ffn"]["fc2"]["kernel"] + bp["ffn"]["fc2"]["bias"]
        maps.append(w)
    residual = np_layer_norm(slots, p["ln_last"])
    g = np_layer_norm(global_feat, p["ln_global"])
    s = g[:, None] + residual
    return s / np.linalg.norm(s, axis=-1, keepdims=True), residual, g / np.linalg.norm(g, axis=-1, keepdims=True), \
        np.stack(maps, 1)


def np_sine_pe(num_tokens, dim):
    """Transcription of `PositionEmbeddingSine1D(dim, normalize=True)` (torch, interleaved sin/cos)."""
    y = np.arange(1, num_tokens + 1, dtype=np.float64) / (num_tokens + 1e-6) * 2 * np.pi
    dim_t = 10000 ** (2 * (np.arange(dim) // 2) / dim)
    pos = y[:, None] / dim_t
    return np.stack([np.sin(pos[:, 0::2]), np.cos(pos[:, 1::2])], axis=2).reshape(num_tokens, dim)


# ---------------------------------------------------------------- fixtures
def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.normal(size=(B, N, D_IN)).astype(np.float32)
    mask = np.ones((B, N), bool)
    mask[0, 4:] = False
    mask[2, [1, 5]] = False  # non-prefix padding
    global_feat = rng.normal(size=(B, D)).astype(np.float32)
    return jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(global_feat)


def make_spm(**kw):
    cfg = dict(num_embeds=K, depth=L, num_heads=H, head_dim=DH)
    cfg.update(kw)
    return SetPredictionModule(**cfg)


def perturb_params(params, seed=1, scale=0.3):
    """LayerNorm scales/biases start at 1/0; random values make the reference comparison meaningful."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree_util.tree_unflatten(
        tree, [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


@pytest.mark.parametrize("shared,pe", [(True, "none"), (False, "sine")])
def test_matches_numpy_reference(shared, pe):
    tokens, mask, g = make_inputs()
    spm = make_spm(share_weights=shared, pos_encoding=pe)
    params = perturb_params(spm.init(jax.random.PRNGKey(0), tokens, mask, g)["params"])
    out = spm.apply({"params": params}, tokens, mask, g)
    ref_set, ref_res, ref_g, ref_maps = np_spm(params, np.asarray(tokens), np.asarray(mask), np.asarray(g),
                                               L, shared, H, DH, pe == "sine")
    np.testing.assert_allclose(out["set"], ref_set, atol=2e-5)
    np.testing.assert_allclose(out["residual"], ref_res, atol=2e-4)
    np.testing.assert_allclose(out["global"], ref_g, atol=2e-5)
    np.testing.assert_allclose(out["attention"], ref_maps, atol=2e-5)


def test_slot_competition_weights_properties():
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(2, 3, 5, 6)) * 3, jnp.float32)  # [B,h,K,N]
    mask = jnp.asarray(rng.random((2, 1, 6)) > 0.4).at[:, :, 0].set(True)
    slot_probs, weights = slot_competition_weights(logits, mask)
    m = np.asarray(mask, bool)[:, :, None, :] * np.ones((1, 3, 1, 1), bool)
    sums = np.asarray(slot_probs.sum(axis=-2))  # over slots, [B,h,N]
    np.testing.assert_allclose(sums[m[:, :, 0]], 1.0, atol=1e-6)
    assert np.all(np.asarray(slot_probs)[np.broadcast_to(~m, slot_probs.shape)] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)  # each slot over valid tokens
    e = np.exp(np.asarray(logits, np.float64))
    np.testing.assert_allclose(slot_probs, e / e.sum(-2, keepdims=True) * m, atol=1e-6)


def test_module_attention_maps_and_padding_invariance():
    tokens, mask, g = make_inputs()
    spm = make_spm()
    params = spm.init(jax.random.PRNGKey(0), tokens, mask, g)
    out = spm.apply(params, tokens, mask, g)
    assert out["attention"].shape == (B, L, H, K, N) and out["slot_attention"].shape == (B, L, H, K, N)
    valid = np.asarray(mask)[:, None, None, None, :]
    np.testing.assert_allclose(np.asarray(out["slot_attention"]).sum(3)[np.asarray(mask)[:, None, None, :]
                               .repeat(L, 1).repeat(H, 2)], 1.0, atol=1e-6)
    assert np.all(np.asarray(out["attention"]) * ~valid == 0.0)
    np.testing.assert_allclose(out["attention"].sum(-1), 1.0, atol=1e-5)
    noisy = jnp.where(mask[..., None], tokens, 1e3 * jax.random.normal(jax.random.PRNGKey(5), tokens.shape))
    out2 = spm.apply(params, noisy, mask, g)
    for key in ("set", "residual", "global", "attention"):
        np.testing.assert_array_equal(out[key], out2[key])


def test_token_permutation_invariance_without_pe_and_not_with_pe():
    tokens, mask, g = make_inputs()
    perm = np.random.default_rng(3).permutation(N)
    for pe, invariant in (("none", True), ("sine", False)):
        spm = make_spm(pos_encoding=pe)
        params = spm.init(jax.random.PRNGKey(0), tokens, mask, g)
        a = spm.apply(params, tokens, mask, g)["set"]
        b = spm.apply(params, tokens[:, perm], mask[:, perm], g)["set"]
        assert np.allclose(a, b, atol=1e-5) == invariant, pe


def test_permuting_queries_permutes_outputs():
    tokens, mask, g = make_inputs()
    spm = make_spm()
    params = spm.init(jax.random.PRNGKey(0), tokens, mask, g)
    perm = np.array([2, 0, 3, 1])
    permuted = jax.tree_util.tree_map(lambda x: x, params)
    permuted["params"]["queries"] = params["params"]["queries"][perm]
    a, b = spm.apply(params, tokens, mask, g), spm.apply(permuted, tokens, mask, g)
    np.testing.assert_allclose(b["set"], a["set"][:, perm], atol=1e-6)
    np.testing.assert_allclose(b["residual"], a["residual"][:, perm], atol=1e-5)
    np.testing.assert_allclose(b["attention"], a["attention"][:, :, :, perm], atol=1e-6)


def test_zero_residual_gives_global_and_rows_are_unit():
    tokens, mask, g = make_inputs()
    spm = make_spm()
    params = spm.init(jax.random.PRNGKey(0), tokens, mask, g)
    out = spm.apply(params, tokens, mask, g)
    np.testing.assert_allclose(jnp.linalg.norm(out["set"], axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(jnp.linalg.norm(out["global"], axis=-1), 1.0, atol=1e-6)
    zeroed = jax.tree_util.tree_map(lambda x: x, params)
    zeroed["params"]["ln_last"] = jax.tree_util.tree_map(jnp.zeros_like, params["params"]["ln_last"])
    out0 = spm.apply(zeroed, tokens, mask, g)
    np.testing.assert_array_equal(out0["residual"], 0.0)
    np.testing.assert_allclose(out0["set"], jnp.broadcast_to(out0["global"][:, None], out0["set"].shape), atol=1e-6)
    assert not np.allclose(out["set"], out0["set"], atol=1e-3)


@pytest.mark.parametrize("num_embeds,depth,shared", [(1, 1, True), (3, 3, True), (2, 3, False)])
def test_k_and_l_configurable(num_embeds, depth, shared):
    tokens, mask, g = make_inputs()
    spm = make_spm(num_embeds=num_embeds, depth=depth, share_weights=shared)
    params = spm.init(jax.random.PRNGKey(0), tokens, mask, g)["params"]
    blocks = sorted(k for k in params if k.startswith("block"))
    assert blocks == (["block"] if shared else [f"block_{i}" for i in range(depth)])
    out = spm.apply({"params": params}, tokens, mask, g)
    assert out["set"].shape == (B, num_embeds, D) and out["attention"].shape == (B, depth, H, num_embeds, N)


def test_sine_pe_matches_torch_transcription():
    np.testing.assert_allclose(sine_positional_encoding_1d(9, 12), np_sine_pe(9, 12), atol=1e-5)
    with pytest.raises(ValueError, match="even"):
        sine_positional_encoding_1d(4, 5)


def test_dropout_and_gradients():
    tokens, mask, g = make_inputs()
    spm = make_spm()
    params = spm.init(jax.random.PRNGKey(0), tokens, mask, g)
    run = jax.jit(lambda key: spm.apply(params, tokens, mask, g, deterministic=False, rngs={"dropout": key})["set"])
    assert not np.allclose(run(jax.random.PRNGKey(1)), run(jax.random.PRNGKey(2)))
    grads = jax.jit(jax.grad(lambda p: spm.apply(p, tokens, mask, g)["set"].sum()))(params)
    assert all(np.isfinite(x).all() for x in jax.tree_util.tree_leaves(grads))
    assert float(jnp.abs(grads["params"]["queries"]).sum()) > 0


def test_bad_shapes_raise():
    tokens, mask, g = make_inputs()
    spm = make_spm()
    with pytest.raises(ValueError, match="tokens"):
        spm.init(jax.random.PRNGKey(0), tokens[0], mask, g)
    with pytest.raises(ValueError, match="token_mask"):
        spm.init(jax.random.PRNGKey(0), tokens, mask[:, :3], g)
    with pytest.raises(ValueError, match="global_feat"):
        spm.init(jax.random.PRNGKey(0), tokens, mask, g[:2])
    with pytest.raises(ValueError, match="pos_encoding"):
        make_spm(pos_encoding="learned").init(jax.random.PRNGKey(0), tokens, mask, g)


def _np_slot_weights(logits, mask, pad_mode, eps=1e-7):
    """Plain numpy slot competition: softmax over slots, then per-slot renormalisation over tokens."""
    logits = np.asarray(logits, np.float64)
    valid = np.asarray(mask, bool)[..., None, :]
    if pad_mode == "reference":  # Set Div: padded logits filled (one constant) before the slot softmax
        logits = np.where(valid, logits, -7.0)
    e = np.exp(logits - logits.max(axis=-2, keepdims=True))
    probs = e / e.sum(axis=-2, keepdims=True)
    if pad_mode == "exclude":
        probs = probs * valid
    return probs, probs / (probs.sum(axis=-1, keepdims=True) + eps)


@pytest.mark.parametrize("pad_mode", ["exclude", "reference"])
def test_slot_competition_pad_modes_match_numpy(pad_mode):
    from mmjax.models.set_prediction import slot_competition_weights
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 4, 6)).astype(np.float32)  # [B, h, K, N]
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)[:, None, :]
    probs, weights = slot_competition_weights(jnp.asarray(logits), jnp.asarray(mask), pad_mode=pad_mode)
    want_p, want_w = _np_slot_weights(logits, mask, pad_mode)
    np.testing.assert_allclose(np.asarray(probs), want_p, atol=1e-6)
    np.testing.assert_allclose(np.asarray(weights), want_w, atol=1e-6)
    padded = np.asarray(probs)[0, :, :, 4:]
    # 'reference' leaks 1/K of every padded token into each slot; 'exclude' gives it none.
    np.testing.assert_allclose(padded, 0.25 if pad_mode == "reference" else 0.0, atol=1e-6)


def test_spm_pad_mode_changes_outputs_only_with_padding():
    from mmjax.models.set_prediction import SetPredictionModule
    rng = np.random.default_rng(4)
    tokens = jnp.asarray(rng.normal(size=(2, 5, 8)).astype(np.float32))
    glob = jnp.asarray(rng.normal(size=(2, 8)).astype(np.float32))
    spm = {m: SetPredictionModule(num_embeds=3, depth=1, num_heads=2, head_dim=4, pad_mode=m)
           for m in ("exclude", "reference")}
    params = spm["exclude"].init(jax.random.PRNGKey(0), tokens, None, glob)
    full = jnp.ones((2, 5), bool)
    part = jnp.asarray(np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool))
    out = {m: (spm[m].apply(params, tokens, full, glob)["set"], spm[m].apply(params, tokens, part, glob)["set"])
           for m in spm}
    np.testing.assert_allclose(np.asarray(out["exclude"][0]), np.asarray(out["reference"][0]), atol=1e-6)
    assert not np.allclose(np.asarray(out["exclude"][1][0]), np.asarray(out["reference"][1][0]), atol=1e-4)
    np.testing.assert_allclose(np.asarray(out["exclude"][1][1]), np.asarray(out["reference"][1][1]), atol=1e-6)
    with pytest.raises(ValueError, match="pad_mode"):
        SetPredictionModule(num_embeds=3, depth=1, num_heads=2, head_dim=4, pad_mode="zero").apply(
            params, tokens, part, glob)
