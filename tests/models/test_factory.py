"""`mmjax.models.factory` notebook helpers: `init_retrieval_model`, `retrieval_image_inputs`,
`build_shapesworld_clip`, `count_params`.

Oracles: the two-line manual route (`build_retrieval_model` + `model.init`) for the initialised variables, a
numpy sum for the parameter count, and the tokenizer's own [SEP] position for the CLIP text pooling.
"""

import jax
import ml_collections
import numpy as np
import pytest

from mmjax.data import shapesworld
from mmjax.data.pipeline import BatchIterator, PipelineConfig, source_from_shapesworld
from mmjax.models.factory import (build_retrieval_model, build_shapesworld_clip, count_params, init_retrieval_model,
                                  retrieval_image_inputs)
from mmjax.models.retrieval import SetRetrievalModel
from mmjax.train.defaults import retrieval_config


@pytest.fixture(scope="module")
def batch_and_tokenizer():
    data = shapesworld.generate("train", preset="tiny", limit=8)
    tok = shapesworld.ShapesWorld(data["config"]).tokenizer()
    it = BatchIterator(source_from_shapesworld(data, tok), PipelineConfig(batch_size=4, prefetch=0))
    return it.batch_at(0, 0), tok


def test_init_retrieval_model_equals_manual_init(batch_and_tokenizer):
    batch, tok = batch_and_tokenizer
    cfg = retrieval_config("smoke").model
    rng = jax.random.PRNGKey(3)
    model, variables = init_retrieval_model(cfg, tok.vocab_size, rng, batch)
    assert isinstance(model, SetRetrievalModel)
    manual_model = build_retrieval_model(cfg, tok.vocab_size)
    # jit: op-by-op init/apply of the Bi-GRU scan costs minutes on the loaded shared CPUs.
    manual = jax.jit(lambda r, *x: manual_model.init({"params": r, "dropout": r}, *x, train=False))(
        rng, batch["image_feats"], batch["image_mask"], batch["caption_ids"], batch["caption_mask"])
    assert set(variables) == set(manual) == {"params", "batch_stats"}
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), variables,
                           dict(manual))
    out = jax.jit(model.apply)(variables, batch["image_feats"], batch["image_mask"], batch["caption_ids"],
                               batch["caption_mask"])
    k, d = cfg.num_embeds, cfg.embed_dim
    assert out["image"]["set"].shape == (4, k, d) and out["text"]["set"].shape == (20, k, d)
    expected = sum(int(np.prod(np.shape(x))) for x in jax.tree_util.tree_leaves(manual["params"]))
    assert count_params(variables["params"]) == expected > 0


def test_image_inputs_and_errors(batch_and_tokenizer):
    batch, tok = batch_and_tokenizer
    feats, mask = retrieval_image_inputs(batch)
    assert feats is batch["image_feats"] and mask is batch["image_mask"]
    pixels = {"images": np.zeros((2, 64, 64, 3), np.uint8)}
    assert retrieval_image_inputs(pixels)[1] is None
    with pytest.raises(KeyError, match="image_feats"):
        retrieval_image_inputs({"caption_ids": batch["caption_ids"]})
    with pytest.raises(KeyError, match="caption_mask"):
        init_retrieval_model(retrieval_config("smoke").model, tok.vocab_size, jax.random.PRNGKey(0),
                             {"image_feats": feats, "image_mask": mask, "caption_ids": batch["caption_ids"]})


def test_build_shapesworld_clip_pools_at_sep(batch_and_tokenizer):
    _, tok = batch_and_tokenizer
    cfg = ml_collections.ConfigDict(dict(width=16, heads=2, vision_layers=1, text_layers=1, image_size=16,
                                         patch_size=8, projection_dim=8))
    model = build_shapesworld_clip(cfg, tok)
    tc, vc = model.config.text_config, model.config.vision_config
    assert (tc.vocab_size, tc.max_position_embeddings, tc.eot_token_id, tc.pad_token_id) == (
        tok.vocab_size, tok.max_len, tok.sep_id, tok.pad_id)
    assert (vc.image_size, vc.patch_size, vc.hidden_size, model.config.projection_dim) == (16, 8, 16, 8)
    enc = tok.encode(["a red circle", "there is a small blue star above a cross"])
    pixels = np.zeros((2, 16, 16, 3), np.float32)
    variables = model.init(jax.random.PRNGKey(0), pixels, enc.ids, enc.attention_mask.astype(np.int32))
    np.testing.assert_allclose(np.exp(variables["params"]["logit_scale"]), 1 / 0.07, rtol=1e-5)
    txt = model.apply(variables, enc.ids, enc.attention_mask.astype(np.int32), method="encode_text")
    sep = np.argmax(enc.ids == tok.sep_id, axis=1)
    np.testing.assert_allclose(txt["global"], np.asarray(txt["tokens"])[np.arange(2), sep], atol=1e-6)
    np.testing.assert_array_equal(txt["valid"], enc.valid_mask)
    img = model.apply(variables, pixels, method="encode_image")
    assert img["patches"].shape == (2, 4, 8) and img["global"].shape == (2, 8)
