"""SetRetrievalModel: two towers, either optional, embed methods, training mode and a jitted loss gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.models.image_towers import RegionTower
from mmjax.models.retrieval import SetRetrievalModel
from mmjax.models.set_prediction import SetPredictionModule
from mmjax.models.text_towers import BiGRUTextTower

B, R, F, D, K, C = 2, 4, 6, 8, 3, 5
KEY = jax.random.PRNGKey(0)


def spm(pe):
    return SetPredictionModule(num_embeds=K, depth=1, num_heads=2, head_dim=4, pos_encoding=pe)


def inputs():
    rng = np.random.default_rng(0)
    feats = jnp.asarray(rng.normal(size=(B, R, F)), jnp.float32)
    region_mask = jnp.asarray([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    lengths = np.array([3, 5, 2, 4, 5, 1, 2, 3, 4, 5])
    ids = jnp.asarray(rng.integers(1, 20, size=(B * C, 5)))
    token_mask = jnp.asarray(np.arange(5)[None] < lengths[:, None])
    return feats, region_mask, ids, token_mask


@pytest.fixture(scope="module")
def model_and_variables():
    model = SetRetrievalModel(RegionTower(embed_dim=D, set_head=spm("none")),
                              BiGRUTextTower(vocab_size=20, embed_dim=D, word_dim=6, set_head=spm("sine")))
    return model, jax.jit(model.init)(KEY, *inputs())


def test_two_towers_and_embed_methods_agree(model_and_variables):
    model, variables = model_and_variables
    feats, region_mask, ids, token_mask = inputs()
    out = model.apply(variables, feats, region_mask, ids, token_mask)
    assert set(out) == {"image", "text"}
    for name, n in (("image", B), ("text", B * C)):
        assert out[name]["set"].shape == (n, K, D) and out[name]["residual"].shape == (n, K, D)
        assert out[name]["global"].shape == (n, D) and out[name]["mask"].shape == (n, K)
        np.testing.assert_allclose(jnp.linalg.norm(out[name]["set"], axis=-1), 1.0, atol=1e-6)
    images_only = model.apply(variables, feats, region_mask, method="embed_images")
    captions_only = model.apply(variables, ids, token_mask, method="embed_captions")
    np.testing.assert_allclose(images_only["set"], out["image"]["set"], atol=1e-6)
    np.testing.assert_allclose(captions_only["set"], out["text"]["set"], atol=1e-6)
    assert set(model.apply(variables, captions=ids, caption_mask=token_mask)) == {"text"}


def test_either_tower_optional():
    feats, region_mask, ids, token_mask = inputs()
    image_only = SetRetrievalModel(image_tower=RegionTower(embed_dim=D, pool="gpo"))  # single-vector VSE∞ baseline
    variables = image_only.init(KEY, feats, region_mask)
    assert "text_tower" not in variables["params"]
    out = image_only.apply(variables, feats, region_mask)
    assert out["image"]["set"].shape == (B, 1, D)
    with pytest.raises(ValueError, match="no text_tower"):
        image_only.apply(variables, captions=ids, caption_mask=token_mask)
    with pytest.raises(ValueError, match="images and/or captions"):
        image_only.apply(variables)
    text_only = SetRetrievalModel(text_tower=BiGRUTextTower(vocab_size=20, embed_dim=D, word_dim=6))
    with pytest.raises(ValueError, match="no image_tower"):
        text_only.init(KEY, feats, region_mask)


@pytest.mark.slow
def test_jitted_training_step_updates_batch_stats_and_gradients(model_and_variables):
    similarity = pytest.importorskip("mmjax.similarity")
    model, variables = model_and_variables
    feats, region_mask, ids, token_mask = inputs()
    positive = jnp.asarray(np.arange(B * C)[None] // C == np.arange(B)[:, None])

    def loss_fn(params, key):
        out, updates = model.apply({"params": params, "batch_stats": variables["batch_stats"]}, feats, region_mask,
                                   ids, token_mask, train=True, mutable=["batch_stats"], rngs={"dropout": key})
        scores = similarity.pairwise_set_similarity(out["image"]["set"], out["text"]["set"], "maxmatch")
        return -jnp.sum(jnp.where(positive, scores, -scores)), updates

    (loss, updates), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(variables["params"], KEY)
    assert np.isfinite(loss)
    old = variables["batch_stats"]["image_tower"]["projection"]["mlp_bn"]["mean"]
    assert not np.allclose(updates["batch_stats"]["image_tower"]["projection"]["mlp_bn"]["mean"], old)
    leaves = jax.tree_util.tree_leaves_with_path(grads)
    assert all(np.isfinite(g).all() for _, g in leaves)
    for tower in ("image_tower", "text_tower"):  # every tower gets gradient through S_H
        assert float(sum(jnp.abs(g).sum() for p, g in leaves if tower in jax.tree_util.keystr(p))) > 0
    with pytest.raises(Exception, match="dropout"):  # train mode needs a dropout rng: never silently deterministic
        model.apply(variables, feats, region_mask, ids, token_mask, train=True, mutable=["batch_stats"])
