"""Region / grid / text towers, PIE head, small ResNet and the GloVe reader (docs/design.md#encoders,
docs/design.md#testing)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.models.glove import read_glove
from mmjax.models.image_towers import GridTower, RegionTower, ResidualProjection
from mmjax.models.pie import PIEHead
from mmjax.models.set_prediction import SetPredictionModule
from mmjax.models.small_cnn import SmallResNet
from mmjax.models.text_towers import (BagOfWordsTextTower, BertTextTower, BiGRUTextTower,
                                      replace_word_embeddings)

B, R, F, D, K = 3, 5, 7, 8, 2
KEY = jax.random.PRNGKey(0)


def spm(pe="none"):
    return SetPredictionModule(num_embeds=K, depth=1, num_heads=2, head_dim=4, pos_encoding=pe)


def region_inputs(seed=0):
    rng = np.random.default_rng(seed)
    feats = jnp.asarray(rng.normal(size=(B, R, F)), jnp.float32)
    mask = jnp.asarray(np.arange(R)[None] < np.array([[2], [5], [4]]))
    return feats, mask.at[2, 0].set(False)  # one non-prefix mask


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ---------------------------------------------------------------- region tower
@pytest.mark.parametrize("train", [False, True])
def test_region_tower_shapes_and_padding_invariance(train):
    feats, mask = region_inputs()
    tower = RegionTower(embed_dim=D, set_head=spm())
    variables = tower.init(KEY, feats, mask)
    run = jax.jit(lambda x: tower.apply(variables, x, mask, train=train, mutable=["batch_stats"],
                                        rngs={"dropout": jax.random.PRNGKey(1)}))
    out, stats = run(feats)
    assert out["set"].shape == (B, K, D) and out["residual"].shape == (B, K, D) and out["global"].shape == (B, D)
    assert out["mask"].shape == (B, K) and out["mask"].all()
    np.testing.assert_allclose(jnp.linalg.norm(out["set"], axis=-1), 1.0, atol=1e-6)
    noisy_out, noisy_stats = run(jnp.where(mask[..., None], feats, 50.0))
    for key in ("set", "residual", "global"):
        np.testing.assert_allclose(noisy_out[key], out[key], atol=1e-6)
    np.testing.assert_allclose(noisy_stats["batch_stats"]["projection"]["mlp_bn"]["mean"],
                               stats["batch_stats"]["projection"]["mlp_bn"]["mean"], atol=1e-6)


def test_region_tower_unmasked_batchnorm_sees_padding_in_training():
    """bn_use_mask=False reproduces the reference's SequenceBN: padded tokens enter the batch statistics."""
    feats, mask = region_inputs()
    tower = RegionTower(embed_dim=D, bn_use_mask=False, dropout_rate=0.0)
    variables = tower.init(KEY, feats, mask)
    run = lambda x: tower.apply(variables, x, mask, train=True, mutable=["batch_stats"])[0]["global"]
    assert not np.allclose(run(feats), run(jnp.where(mask[..., None], feats, 50.0)), atol=1e-3)


@pytest.mark.parametrize("pool", ["max", "gpo"])
def test_single_vector_global_is_pooled_projection(pool):
    feats, mask = region_inputs()
    tower = RegionTower(embed_dim=D, pool=pool)  # set_head=None: the VSE∞-style single-vector baseline
    variables = tower.init(KEY, feats, mask)
    out = tower.apply(variables, feats, mask)
    assert out["set"].shape == (B, 1, D) and out["residual"] is None
    np.testing.assert_allclose(out["set"][:, 0], out["global"], atol=1e-7)
    h = ResidualProjection(D).apply({"params": variables["params"]["projection"],
                                     "batch_stats": variables["batch_stats"]["projection"]}, feats, mask)
    h, m = np.asarray(h, np.float64), np.asarray(mask)
    if pool == "max":
        ref = np.stack([h[b][m[b]].max(0) for b in range(B)])
        np.testing.assert_allclose(out["global"], unit(ref), atol=1e-6)
    else:  # GPO interpolates between order statistics: bounded by the valid min and max in every dimension
        g = np.asarray(out["global"])
        assert g.shape == (B, D) and np.all(np.isfinite(g))


def test_pie_head_matches_numpy_and_ignores_padding():
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.normal(size=(B, R, F)), jnp.float32)
    _, mask = region_inputs()
    g = jnp.asarray(rng.normal(size=(B, D)), jnp.float32)
    head = PIEHead(num_embeds=3)
    params = head.init(KEY, tokens, mask, g)["params"]
    params = jax.tree_util.tree_map(lambda x: x + 0.3 * jnp.asarray(rng.normal(size=x.shape), x.dtype), params)
    out = head.apply({"params": params}, tokens, mask, g)
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params)
    x, m = np.asarray(tokens, np.float64), np.asarray(mask)
    scores = np.tanh(x @ p["w1"]["kernel"]) @ p["w2"]["kernel"]  # [B,R,K]
    ref_set, ref_attn = [], []
    for b in range(B):
        s = scores[b][m[b]]
        a = np.exp(s - s.max(0)) / np.exp(s - s.max(0)).sum(0)
        full = np.zeros((R, 3))
        full[m[b]] = a
        res = 1 / (1 + np.exp(-((a.T @ x[b][m[b]]) @ p["fc"]["kernel"] + p["fc"]["bias"])))
        e = np.asarray(g, np.float64)[b] + res
        e = (e - e.mean(-1, keepdims=True)) / np.sqrt(e.var(-1, keepdims=True) + 1e-5)
        ref_set.append(unit(e * p["layer_norm"]["scale"] + p["layer_norm"]["bias"]))
        ref_attn.append(full.T)
    np.testing.assert_allclose(out["set"], np.stack(ref_set), atol=1e-5)
    np.testing.assert_allclose(out["attention"][:, 0, 0], np.stack(ref_attn), atol=1e-6)
    noisy = head.apply({"params": params}, jnp.where(mask[..., None], tokens, 9.0), mask, g)
    np.testing.assert_array_equal(noisy["set"], out["set"])


# ---------------------------------------------------------------- grid tower and small ResNet
def test_small_resnet_default_widths_give_8x8x256():
    shape = jax.eval_shape(lambda: SmallResNet().init_with_output(KEY, jnp.zeros((2, 64, 64, 3), jnp.uint8))[0])
    assert shape.shape == (2, 8, 8, 256)


@pytest.mark.slow
def test_grid_tower_with_backbone_and_with_precomputed_maps():
    images = jnp.asarray(np.random.default_rng(0).integers(0, 255, (2, 16, 16, 3)), jnp.uint8)
    tower = GridTower(embed_dim=D, backbone=SmallResNet(widths=(4, 4, 8, 8)), set_head=spm())
    variables = jax.jit(tower.init)(KEY, images)
    out, _ = jax.jit(lambda v, x: tower.apply(v, x, train=True, mutable=["batch_stats"], rngs={"dropout": KEY}))(
        variables, images)
    assert out["set"].shape == (2, K, D) and out["attention"].shape[-1] == 4  # 16/8 × 16/8 grid tokens
    maps = jnp.ones((2, 3, 3, 6))
    pre = GridTower(embed_dim=D, pool="gpo", set_head=PIEHead(num_embeds=K))
    out = pre.apply(pre.init(KEY, maps), maps)
    assert out["set"].shape == (2, K, D) and out["attention"].shape == (2, 1, 1, K, 9)
    with pytest.raises(ValueError, match="mask"):
        pre.init(KEY, maps, jnp.ones((2, 9), bool))


# ---------------------------------------------------------------- text towers
def np_gru(params, xs):
    """Flax GRUCell equations in float64 over a sequence xs [T, E]; returns the outputs [T, H]."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    sig = lambda v: 1 / (1 + np.exp(-v))
    h = np.zeros(p["hn"]["kernel"].shape[0])
    outs = []
    for x in xs:
        r = sig(x @ p["ir"]["kernel"] + p["ir"]["bias"] + h @ p["hr"]["kernel"])
        z = sig(x @ p["iz"]["kernel"] + p["iz"]["bias"] + h @ p["hz"]["kernel"])
        n = np.tanh(x @ p["in"]["kernel"] + p["in"]["bias"] + r * (h @ p["hn"]["kernel"] + p["hn"]["bias"]))
        h = (1 - z) * n + z * h
        outs.append(h)
    return np.stack(outs)


def text_inputs():
    ids = jnp.asarray([[3, 4, 5, 0, 0, 0], [6, 7, 8, 9, 10, 11], [2, 0, 0, 0, 0, 0]])
    return ids, ids > 0


def test_bigru_global_is_averaged_final_states_of_valid_tokens():
    ids, mask = text_inputs()
    tower = BiGRUTextTower(vocab_size=12, embed_dim=D, word_dim=6, set_head=spm("sine"))
    variables = tower.init(KEY, ids, mask)
    out = tower.apply(variables, ids, mask)
    p = variables["params"]
    g_ref = []
    for b in range(3):
        n = int(mask[b].sum())
        words = np.asarray(p["word_embed"]["embedding"])[np.asarray(ids[b, :n])]
        fwd = np_gru(p["gru_forward"]["cell"], words)[-1]
        bwd = np_gru(p["gru_backward"]["cell"], words[::-1])[-1]
        g_ref.append((fwd + bwd) / 2)
    # the tower returns ĝ = normalise(LN_g(g)); with the default LN_g (scale 1, bias 0) compare after that map
    g_ref = np.stack(g_ref)
    g_ref = (g_ref - g_ref.mean(-1, keepdims=True)) / np.sqrt(g_ref.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out["global"], unit(g_ref), atol=1e-5)
    assert out["set"].shape == (3, K, D) and out["attention"].shape == (3, 1, 2, K, 6)
    np.testing.assert_array_equal(np.asarray(out["attention"])[~np.broadcast_to(
        np.asarray(mask)[:, None, None, None, :], out["attention"].shape)], 0.0)


def test_bigru_padding_ids_and_length_do_not_matter_without_pe():
    ids, mask = text_inputs()
    for global_pool in ("rnn", "max"):
        tower = BiGRUTextTower(vocab_size=12, embed_dim=D, word_dim=6, set_head=spm("none"), global_pool=global_pool)
        variables = tower.init(KEY, ids, mask)
        out = tower.apply(variables, ids, mask)
        other = tower.apply(variables, jnp.where(mask, ids, 7), mask)  # different ids at padded positions
        longer = tower.apply(variables, jnp.pad(ids, ((0, 0), (0, 3))), jnp.pad(mask, ((0, 0), (0, 3))))
        for o in (other, longer):
            np.testing.assert_allclose(o["set"], out["set"], atol=1e-6)
            np.testing.assert_allclose(o["global"], out["global"], atol=1e-6)


def test_bert_tower_with_tiny_bert():
    from mmjax.models.bert import BertConfig, BertModel

    ids, mask = text_inputs()
    bert = BertModel(BertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=20, max_position_embeddings=16))
    for pool in ("cls", "max"):
        tower = BertTextTower(bert=bert, embed_dim=D, global_pool=pool, set_head=spm())
        variables = tower.init(KEY, ids, mask)
        out = tower.apply(variables, ids, mask)
        hidden = bert.apply({"params": variables["params"]["bert"]}, ids, mask)
        local = np.asarray(hidden @ variables["params"]["proj"]["kernel"] + variables["params"]["proj"]["bias"])
        g = local[:, 0] if pool == "cls" else np.stack([local[b][np.asarray(mask[b])].max(0) for b in range(3)])
        g = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(out["global"], unit(g), atol=1e-5)
        other = tower.apply(variables, jnp.where(mask, ids, 5), mask)
        np.testing.assert_allclose(other["set"], out["set"], atol=1e-5)


def test_bag_of_words_and_single_vector_text():
    ids, mask = text_inputs()
    tower = BagOfWordsTextTower(vocab_size=12, embed_dim=D, word_dim=6)
    out = tower.apply(tower.init(KEY, ids, mask), ids, mask)
    assert out["set"].shape == (3, 1, D) and out["residual"] is None


def test_text_bad_shapes_raise():
    ids, mask = text_inputs()
    tower = BiGRUTextTower(vocab_size=12, embed_dim=D, word_dim=6)
    with pytest.raises(ValueError, match="ids"):
        tower.init(KEY, ids[0], mask)
    with pytest.raises(ValueError, match="mask"):
        tower.init(KEY, ids, mask[:, :2])
    with pytest.raises(ValueError, match="feats"):
        RegionTower(embed_dim=D).init(KEY, jnp.ones((2, 3)), None)


# ---------------------------------------------------------------- GloVe
def test_read_glove_and_replace_word_embeddings(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text("the 0.1 0.2 0.3\ncat 1 2 3\nnew york 4 5 6\ndogs 7 8 9\nwell 0 0 1\n")
    vocab = ["<pad>", "the", "cat", "new york", "well-", "dogs/cats", "zebra"]
    matrix, found = read_glove(path, vocab, seed=0)
    assert matrix.shape == (7, 3) and matrix.dtype == np.float32
    np.testing.assert_array_equal(found, [False, True, True, True, True, True, False])
    np.testing.assert_allclose(matrix[1], [0.1, 0.2, 0.3])
    np.testing.assert_allclose(matrix[3], [4, 5, 6])  # word containing a space
    np.testing.assert_allclose(matrix[4], [0, 0, 1])  # 'well-' → 'well'
    np.testing.assert_allclose(matrix[5], [7, 8, 9])  # 'dogs/cats' → 'dogs'
    assert np.all(np.abs(matrix[[0, 6]]) <= 0.1)
    _, found_strict = read_glove(path, vocab, normalize_missing=False)
    assert not found_strict[4] and not found_strict[5]

    (tmp_path / "bad.txt").write_text("the 0.1 0.2 0.3\ncat 1 2\n")
    with pytest.raises(ValueError, match="bad.txt:2"):
        read_glove(tmp_path / "bad.txt", ["cat"])

    ids, mask = text_inputs()
    tower = BagOfWordsTextTower(vocab_size=7, embed_dim=D, word_dim=3)
    params = tower.init(KEY, jnp.minimum(ids, 6), mask)["params"]
    new = replace_word_embeddings({"text_tower": params}, matrix)
    np.testing.assert_array_equal(new["text_tower"]["word_embed"]["embedding"], matrix)
    with pytest.raises(ValueError, match="shape"):
        replace_word_embeddings(params, matrix[:3])
    with pytest.raises(ValueError, match="exactly one"):
        replace_word_embeddings({"a": params, "b": params}, matrix)
