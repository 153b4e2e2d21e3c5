"""Flax CLIP vs transformers' PyTorch CLIPModel on a tiny random checkpoint written with `save_pretrained`.

Checks the Flow-CLIP taps of docs/design.md#flowclip-inputs against HF's own computations: globals against HF's pooled
paths (CLS → post_layernorm → visual_projection; first EOT → text_projection), patch states against post_layernorm +
visual_projection applied to HF's vision last_hidden_state, token states against text_projection of HF's text
last_hidden_state, and the logit-scaled cosine matrix against `CLIPModel.forward`'s logits_per_image.
"""

from functools import partial

import jax
import numpy as np
import pytest

from mmjax.models.hf import load_hf_clip

ATOL = 1e-4
CAPTIONS = ["a cat", "the dog and a cat", "dog", "a big cat on a dog"]


def _torch_reference(model, pixels_nchw, input_ids, attention_mask):
    import torch

    with torch.no_grad():
        px, ids, am = (torch.from_numpy(np.asarray(a)) for a in (pixels_nchw, input_ids, attention_mask))
        vis = model.vision_model(pixel_values=px)
        txt = model.text_model(input_ids=ids, attention_mask=am)
        out = model(pixel_values=px, input_ids=ids, attention_mask=am)
        return {
            "image_global": model.visual_projection(vis.pooler_output).numpy(),
            "patches": model.visual_projection(model.vision_model.post_layernorm(vis.last_hidden_state[:, 1:])).numpy(),
            "text_global": model.text_projection(txt.pooler_output).numpy(),
            "tokens": model.text_projection(txt.last_hidden_state).numpy(),
            "logits_per_image": out.logits_per_image.numpy(),
        }


@pytest.mark.torch
def test_flax_clip_matches_pytorch(hf_tiny_clip_torch_dir):
    directory, torch_model = hf_tiny_clip_torch_dir
    model, params, tokenizer = load_hf_clip(directory)
    rng = np.random.default_rng(0)
    pixels_nchw = rng.normal(size=(3, 3, 16, 16)).astype(np.float32)
    enc = tokenizer(CAPTIONS, padding="max_length", max_length=16, truncation=True, return_tensors="np")
    ids, am = enc["input_ids"], enc["attention_mask"]
    ref = _torch_reference(torch_model, pixels_nchw, ids, am)

    variables = {"params": params}
    image = jax.jit(partial(model.apply, method="encode_image"))(variables, pixels_nchw.transpose(0, 2, 3, 1))
    text = jax.jit(partial(model.apply, method="encode_text"))(variables, ids, am)

    np.testing.assert_allclose(image["global"], ref["image_global"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(image["patches"], ref["patches"], atol=ATOL, rtol=0)
    assert image["patches"].shape == (3, 16, 20)
    np.testing.assert_allclose(text["global"], ref["text_global"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(text["tokens"], ref["tokens"], atol=ATOL, rtol=0)

    def unit(x):
        x = np.asarray(x)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    scale = float(np.exp(params["logit_scale"]))
    np.testing.assert_allclose(scale * unit(image["global"]) @ unit(text["global"]).T, ref["logits_per_image"],
                               atol=ATOL * scale, rtol=0)
    full = jax.jit(model.apply)(variables, pixels_nchw.transpose(0, 2, 3, 1), ids, am)
    np.testing.assert_allclose(full["logit_scale"], scale, rtol=1e-6)
    np.testing.assert_allclose(full["text"]["global"], text["global"], atol=1e-6)


def test_valid_mask_is_one_to_first_eot(hf_tiny_clip_tokenizer_dir, hf_tiny_clip_config, hf_random_params):
    """valid = positions 1..eot−1 with eot the FIRST EOT id, whether padding is EOT (HF) or 0 (OpenAI)."""
    from mmjax.models.clip import CLIPConfig, CLIPModel

    model = CLIPModel(CLIPConfig.from_dict(hf_tiny_clip_config))
    sot, eot = 56, 57
    ids = np.array([
        [sot, 26, 53, eot, eot, eot, eot, eot],  # HF padding with EOT
        [sot, 26, 53, eot, 0, 0, 0, 0],          # OpenAI padding with 0
        [sot, 26, eot, 26, 53, eot, eot, eot],   # an unknown char became EOT mid-sentence: the first one counts
        [sot, 1, 2, 3, 4, 5, 6, eot],            # full length
        [sot, eot, eot, eot, eot, eot, eot, eot],  # empty caption: no valid token
    ])
    am = np.ones_like(ids)
    params = hf_random_params(model, np.zeros((1, 16, 16, 3), np.float32), ids, am)
    out = jax.jit(partial(model.apply, method="encode_text"))({"params": params}, ids, am)
    expected_eot = [3, 3, 2, 7, 1]
    want_valid = np.arange(8)[None] < np.array(expected_eot)[:, None]
    want_valid[:, 0] = False
    np.testing.assert_array_equal(out["valid"], want_valid)
    tokens = np.asarray(out["tokens"])
    np.testing.assert_array_equal(out["global"], tokens[np.arange(5), expected_eot])
    # Causal tower: states before the first EOT do not depend on what follows it (padding convention irrelevant).
    np.testing.assert_allclose(tokens[0, :4], tokens[1, :4], atol=1e-6)
    # The tokenizer agrees with the hand-written rows above.
    from transformers import CLIPTokenizerFast

    tok = CLIPTokenizerFast.from_pretrained(hf_tiny_clip_tokenizer_dir, local_files_only=True)
    np.testing.assert_array_equal(tok(["a cat"], padding="max_length", max_length=8)["input_ids"][0], ids[0])


def test_encode_image_rejects_wrong_layout(hf_tiny_clip_config, hf_random_params):
    from mmjax.models.clip import CLIPConfig, CLIPModel

    model = CLIPModel(CLIPConfig.from_dict(hf_tiny_clip_config))
    ids = np.zeros((1, 4), np.int32)
    params = hf_random_params(model, np.zeros((1, 16, 16, 3), np.float32), ids, ids + 1)
    with pytest.raises(ValueError, match="NHWC"):
        model.apply({"params": params}, np.zeros((1, 3, 16, 16), np.float32), method="encode_image")


def test_config_from_hf_json_and_legacy_eos():
    """Real CLIP configs written before transformers PR #24773 say eos_token_id = 2; EOT is then vocab_size − 1."""
    from mmjax.models.clip import CLIPConfig

    legacy = CLIPConfig.from_dict({
        "architectures": ["CLIPModel"], "projection_dim": 512, "logit_scale_init_value": 2.6592,
        "text_config": {"bos_token_id": 0, "eos_token_id": 2, "vocab_size": 49408, "projection_dim": 512},
        "vision_config": {"patch_size": 32, "dropout": 0.0}})
    assert legacy.text_config.eot_token_id == 49407
    assert legacy.vision_config.num_patches == 49 and legacy.projection_dim == 512
    assert CLIPConfig.from_dict({"text_config": {"eos_token_id": 49407}}).text_config.eot_token_id == 49407
    with pytest.raises(ValueError, match="hidden_act"):
        CLIPConfig.from_dict({"text_config": {"hidden_act": "mystery"}})
