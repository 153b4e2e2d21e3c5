"""The region-token CLIP (`mmjax.models.region_clip`): one output token per region slot, padding slots are never
attended to (their content cannot change any other output), and the text tower is CLIPModel's."""

import jax
import numpy as np

from mmjax.models.clip import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPVisionConfig
from mmjax.models.region_clip import RegionCLIPModel

CONFIG = CLIPConfig(text_config=CLIPTextConfig(vocab_size=30, hidden_size=16, intermediate_size=32,
                                               num_hidden_layers=1, num_attention_heads=2,
                                               max_position_embeddings=8, eos_token_id=3),
                    vision_config=CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                                   num_attention_heads=2),
                    projection_dim=8)


def _inputs(seed=0, b=3, r=5, f=12):
    rng = np.random.default_rng(seed)
    regions = rng.normal(size=(b, r, f)).astype(np.float32)
    mask = np.ones((b, r), bool)
    mask[:, 3:] = False
    ids = np.array([[1, 5, 6, 3, 0, 0, 0, 0]] * b, np.int32)
    return regions, mask, ids, (ids > 0).astype(np.int32)


def test_region_tokens_and_padding_isolation():
    regions, mask, ids, att = _inputs()
    model = RegionCLIPModel(CONFIG)
    variables = model.init(jax.random.PRNGKey(0), regions, mask, ids, att)
    out = model.apply(variables, regions, mask, method="encode_image")
    assert out["global"].shape == (3, 8) and out["patches"].shape == (3, 5, 8)
    changed = regions.copy()
    changed[:, 3:] = 100.0  # the padding slots' vectors: never read (a slot is its pad embedding when masked)
    again = model.apply(variables, changed, mask, method="encode_image")
    np.testing.assert_array_equal(again["global"], out["global"])
    np.testing.assert_array_equal(again["patches"], out["patches"])
    valid_changed = regions.copy()
    valid_changed[:, 0] += 1.0
    moved = model.apply(variables, valid_changed, mask, method="encode_image")
    assert np.abs(np.asarray(moved["global"]) - np.asarray(out["global"])).max() > 1e-4


def test_text_tower_is_clips():
    regions, mask, ids, att = _inputs(1)
    region_model = RegionCLIPModel(CONFIG)
    variables = region_model.init(jax.random.PRNGKey(0), regions, mask, ids, att)
    text = region_model.apply(variables, ids, att, method="encode_text")
    pixel = CLIPModel(CONFIG)
    pixel_vars = pixel.init(jax.random.PRNGKey(0), np.zeros((1, 224, 224, 3), np.float32), ids[:1], att[:1])
    params = {**pixel_vars["params"], "text_model": variables["params"]["text_model"],
              "text_projection": variables["params"]["text_projection"]}
    np.testing.assert_allclose(pixel.apply({"params": params}, ids, att, method="encode_text")["global"],
                               text["global"], atol=1e-6)
    assert text["valid"].tolist() == [[False, True, True, False, False, False, False, False]] * 3


def test_frozen_base_limit_encodes_the_first_scenes_of_the_split():
    """`FrozenShapesWorldCLIP(..., limit=n)` (notebook 03's sizes) holds the split's first n scenes: the same
    captions and the same token features as the first rows of a larger limit."""
    import dataclasses
    from mmjax.data import shapesworld
    from mmjax.models.frozen_clip import FrozenShapesWorldCLIP, image_inputs
    first = shapesworld.generate("test", mode="regions", limit=1)
    tok = shapesworld.ShapesWorld(first["config"]).tokenizer()
    config = dataclasses.replace(CONFIG, text_config=dataclasses.replace(
        CONFIG.text_config, vocab_size=len(tok.vocab), max_position_embeddings=tok.max_len))
    info = {"task": "clip_pretrain", "mode": "regions", "clip_config": dataclasses.asdict(config),
            "preset": "default", "seed": 0}
    images, enc = image_inputs(first, "regions"), tok.encode(first["captions"][0][:1])
    params = RegionCLIPModel(config).init(jax.random.PRNGKey(0), images[..., :-1], images[..., -1] > 0.5, enc.ids,
                                          enc.attention_mask.astype(np.int32))
    a = FrozenShapesWorldCLIP(params, info, "/nowhere", "test", 16, limit=3)
    b = FrozenShapesWorldCLIP(params, info, "/nowhere", "test", 16, limit=5)
    assert len(a.data["captions"]) == 3 and a.data["captions"] == b.data["captions"][:3]
    np.testing.assert_array_equal(a.encode_images(a.images)["patches"], b.encode_images(b.images)["patches"][:3])
