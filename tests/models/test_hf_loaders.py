"""HF safetensors → Flax loaders without torch: CLIP round-trip from a numpy-written checkpoint, and error reports.

The checkpoint is written here from an explicit list of Hugging Face `CLIPModel` tensor names and PyTorch shapes
(Linear (out, in), Conv2d (out, in, kh, kw)), independent of the loader's mapping.
"""

import json
from functools import partial

import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

from mmjax.models.clip import CLIPConfig, CLIPVisionEmbeddings
from mmjax.models.hf import CheckpointError, load_hf_bert, load_hf_clip


def hf_clip_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    t, v, d = config["text_config"], config["vision_config"], config["projection_dim"]
    shapes = {"logit_scale": (), "text_projection.weight": (d, t["hidden_size"]),
              "visual_projection.weight": (d, v["hidden_size"])}

    def tower(prefix, c):
        h, i = c["hidden_size"], c["intermediate_size"]
        for n in range(c["num_hidden_layers"]):
            layer = f"{prefix}.encoder.layers.{n}"
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                shapes[f"{layer}.self_attn.{proj}.weight"] = (h, h)
                shapes[f"{layer}.self_attn.{proj}.bias"] = (h,)
            shapes.update({f"{layer}.mlp.fc1.weight": (i, h), f"{layer}.mlp.fc1.bias": (i,),
                           f"{layer}.mlp.fc2.weight": (h, i), f"{layer}.mlp.fc2.bias": (h,)})
            for ln in ("layer_norm1", "layer_norm2"):
                shapes.update({f"{layer}.{ln}.weight": (h,), f"{layer}.{ln}.bias": (h,)})

    tower("text_model", t)
    tower("vision_model", v)
    th, vh = t["hidden_size"], v["hidden_size"]
    n_patches = (v["image_size"] // v["patch_size"]) ** 2
    shapes.update({
        "text_model.embeddings.token_embedding.weight": (t["vocab_size"], th),
        "text_model.embeddings.position_embedding.weight": (t["max_position_embeddings"], th),
        "text_model.final_layer_norm.weight": (th,), "text_model.final_layer_norm.bias": (th,),
        "vision_model.embeddings.class_embedding": (vh,),
        "vision_model.embeddings.patch_embedding.weight": (vh, v["num_channels"], v["patch_size"], v["patch_size"]),
        "vision_model.embeddings.position_embedding.weight": (n_patches + 1, vh),
        "vision_model.pre_layrnorm.weight": (vh,), "vision_model.pre_layrnorm.bias": (vh,),
        "vision_model.post_layernorm.weight": (vh,), "vision_model.post_layernorm.bias": (vh,),
    })
    return shapes


def write_clip_checkpoint(directory, config: dict, tensors: dict[str, np.ndarray]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "clip", **config}))
    save_file(tensors, str(directory / "model.safetensors"))


def write_tiny_clip(directory):
    """A random tiny HF CLIP directory (config, model.safetensors, tokenizer) for the evaluation and cache tests."""
    from tests.module_loader import load
    fixtures = load("tests/models/conftest.py", "hf_fixtures")
    config = fixtures.tiny_clip_config_dict()
    rng = np.random.default_rng(0)
    tensors = {name: np.asarray(0.2 * rng.normal(size=shape), np.float32)
               for name, shape in hf_clip_shapes(config).items()}
    write_clip_checkpoint(directory, config, tensors)
    fixtures.write_tiny_clip_tokenizer(directory)
    return directory


@pytest.fixture
def clip_tensors(hf_tiny_clip_config):
    rng = np.random.default_rng(0)
    tensors = {name: rng.normal(size=shape).astype(np.float32)
               for name, shape in hf_clip_shapes(hf_tiny_clip_config).items()}
    # Older checkpoints store the position-id buffer; it is checked and skipped.
    tensors["text_model.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    return tensors


@pytest.fixture
def clip_dir(tmp_path, hf_tiny_clip_config, clip_tensors, hf_write_tiny_clip_tokenizer):
    directory = tmp_path / "clip"
    write_clip_checkpoint(directory, hf_tiny_clip_config, clip_tensors)
    hf_write_tiny_clip_tokenizer(directory)
    return directory


def test_clip_round_trip(clip_dir, clip_tensors, hf_tiny_clip_config):
    model, params, tokenizer = load_hf_clip(clip_dir)
    assert model.config == CLIPConfig.from_dict(hf_tiny_clip_config)
    flat = jax.tree_util.tree_leaves(params)
    assert len(flat) == len(clip_tensors) - 1  # every tensor but the position_ids buffer became a parameter
    layer = params["vision_model"]["encoder"]["layers_1"]
    np.testing.assert_array_equal(layer["self_attn"]["q_proj"]["kernel"],
                                  clip_tensors["vision_model.encoder.layers.1.self_attn.q_proj.weight"].T)
    np.testing.assert_array_equal(layer["mlp"]["fc1"]["bias"],
                                  clip_tensors["vision_model.encoder.layers.1.mlp.fc1.bias"])
    np.testing.assert_array_equal(params["text_model"]["final_layer_norm"]["scale"],
                                  clip_tensors["text_model.final_layer_norm.weight"])
    np.testing.assert_array_equal(params["text_model"]["embeddings"]["token_embedding"]["embedding"],
                                  clip_tensors["text_model.embeddings.token_embedding.weight"])
    np.testing.assert_array_equal(params["text_projection"]["kernel"], clip_tensors["text_projection.weight"].T)
    assert params["logit_scale"].shape == () and params["logit_scale"] == clip_tensors["logit_scale"]
    assert tokenizer.eos_token_id == 57

    # Conv layout against a numpy patch embedding computed from the PyTorch-layout (out, in, kh, kw) weight.
    rng = np.random.default_rng(1)
    pixels = rng.normal(size=(2, 16, 16, 3)).astype(np.float32)
    emb = clip_tensors["vision_model.embeddings.patch_embedding.weight"]
    patches = pixels.reshape(2, 4, 4, 4, 4, 3)  # b, row, kh, col, kw, ch
    want = np.einsum("brhcwi,oihw->brco", patches, emb).reshape(2, 16, -1)
    want = np.concatenate([np.broadcast_to(clip_tensors["vision_model.embeddings.class_embedding"], (2, 1, 24)),
                           want], axis=1) + clip_tensors["vision_model.embeddings.position_embedding.weight"]
    got = CLIPVisionEmbeddings(model.config.vision_config).apply(
        {"params": params["vision_model"]["embeddings"]}, pixels)
    np.testing.assert_allclose(got, want, atol=1e-4)

    enc = tokenizer(["a cat", "dog"], padding="max_length", max_length=16, return_tensors="np")
    text = jax.jit(partial(model.apply, method="encode_text"))({"params": params}, enc["input_ids"],
                                                                 enc["attention_mask"])
    image = jax.jit(partial(model.apply, method="encode_image"))({"params": params}, pixels)
    assert text["global"].shape == (2, 20) and text["tokens"].shape == (2, 16, 20)
    np.testing.assert_array_equal(text["valid"].sum(1), [2, 1])
    assert image["global"].shape == (2, 20) and image["patches"].shape == (2, 16, 20)


def test_sharded_checkpoint(tmp_path, hf_tiny_clip_config, clip_tensors):
    directory = tmp_path / "sharded"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(hf_tiny_clip_config))
    names = sorted(clip_tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, shard_names in shards.items():
        save_file({n: clip_tensors[n] for n in shard_names}, str(directory / file))
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, shard_names in shards.items() for n in shard_names}}))
    _, params, tokenizer = load_hf_clip(directory, with_tokenizer=False)
    assert tokenizer is None
    np.testing.assert_array_equal(params["visual_projection"]["kernel"], clip_tensors["visual_projection.weight"].T)


def test_missing_files(tmp_path, clip_dir):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_clip(tmp_path / "nowhere")
    (clip_dir / "model.safetensors").unlink()
    (clip_dir / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(FileNotFoundError, match="no pickle"):
        load_hf_clip(clip_dir)


def test_missing_tokenizer_files(tmp_path, hf_tiny_clip_config, clip_tensors):
    write_clip_checkpoint(tmp_path / "c", hf_tiny_clip_config, clip_tensors)
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        load_hf_clip(tmp_path / "c")


def test_unknown_tensor_is_named(tmp_path, hf_tiny_clip_config, clip_tensors):
    clip_tensors["text_model.encoder.layers.0.self_attn.rotary.weight"] = np.zeros((3, 3), np.float32)
    write_clip_checkpoint(tmp_path / "c", hf_tiny_clip_config, clip_tensors)
    with pytest.raises(CheckpointError, match=r"unknown tensors.*layers\.0\.self_attn\.rotary\.weight \(3, 3\)"):
        load_hf_clip(tmp_path / "c", with_tokenizer=False)


def test_missing_tensor_is_named(tmp_path, hf_tiny_clip_config, clip_tensors):
    del clip_tensors["vision_model.encoder.layers.1.mlp.fc2.weight"]
    write_clip_checkpoint(tmp_path / "c", hf_tiny_clip_config, clip_tensors)
    with pytest.raises(CheckpointError, match=r"missing tensors.*vision_model\.encoder\.layers\.1\.mlp\.fc2\.weight"
                                              r" \(parameter .*, shape \(40, 24\)\)"):
        load_hf_clip(tmp_path / "c", with_tokenizer=False)


def test_shape_mismatch_names_tensor_both_shapes_and_file(tmp_path, hf_tiny_clip_config, clip_tensors):
    clip_tensors["text_projection.weight"] = np.zeros((20, 31), np.float32)
    write_clip_checkpoint(tmp_path / "c", hf_tiny_clip_config, clip_tensors)
    with pytest.raises(CheckpointError) as info:
        load_hf_clip(tmp_path / "c", with_tokenizer=False)
    message = str(info.value)
    assert "'text_projection.weight'" in message and "model.safetensors" in message
    assert "(20, 31)" in message and "(32, 20)" in message


def test_bad_position_ids_buffer(tmp_path, hf_tiny_clip_config, clip_tensors):
    clip_tensors["text_model.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None][:, ::-1].copy()
    write_clip_checkpoint(tmp_path / "c", hf_tiny_clip_config, clip_tensors)
    with pytest.raises(CheckpointError, match="position_ids"):
        load_hf_clip(tmp_path / "c", with_tokenizer=False)


def test_tokenizer_eot_must_match_config(tmp_path, hf_tiny_clip_config, clip_tensors, hf_write_tiny_clip_tokenizer):
    config = json.loads(json.dumps(hf_tiny_clip_config))
    config["text_config"]["eos_token_id"] = 3
    write_clip_checkpoint(tmp_path / "c", config, clip_tensors)
    hf_write_tiny_clip_tokenizer(tmp_path / "c")
    with pytest.raises(ValueError, match="EOT id 57 != model EOT id 3"):
        load_hf_clip(tmp_path / "c")


def _bert_tensors(prefix: str, with_pooler: bool) -> dict[str, np.ndarray]:
    h, i, v, p = 8, 12, 20, 10
    shapes = {"embeddings.word_embeddings.weight": (v, h), "embeddings.position_embeddings.weight": (p, h),
              "embeddings.token_type_embeddings.weight": (2, h),
              "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,)}
    layer = "encoder.layer.0"
    for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
        shapes.update({f"{layer}.{m}.weight": (h, h), f"{layer}.{m}.bias": (h,)})
    shapes.update({f"{layer}.intermediate.dense.weight": (i, h), f"{layer}.intermediate.dense.bias": (i,),
                   f"{layer}.output.dense.weight": (h, i), f"{layer}.output.dense.bias": (h,)})
    for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
        shapes.update({f"{layer}.{ln}.weight": (h,), f"{layer}.{ln}.bias": (h,)})
    if with_pooler:
        shapes.update({"pooler.dense.weight": (h, h), "pooler.dense.bias": (h,)})
    rng = np.random.default_rng(0)
    return {prefix + k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}


BERT_CONFIG = {"model_type": "bert", "vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 12, "max_position_embeddings": 10}


@pytest.mark.parametrize("prefix,with_pooler,extra", [
    ("", True, {}),                                                   # bare BertModel (as all-MiniLM-L6-v2)
    ("bert.", True, {"classifier.weight": (3, 8), "classifier.bias": (3,)}),  # BertForSequenceClassification
])
def test_bert_prefixes(tmp_path, prefix, with_pooler, extra):
    tensors = _bert_tensors(prefix, with_pooler)
    tensors.update({k: np.zeros(s, np.float32) for k, s in extra.items()})
    (tmp_path / "config.json").write_text(json.dumps(BERT_CONFIG))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    _, params, tokenizer = load_hf_bert(tmp_path, with_tokenizer=False)
    assert tokenizer is None
    np.testing.assert_array_equal(params["encoder"]["layer_0"]["attention"]["output"]["dense"]["kernel"],
                                  tensors[prefix + "encoder.layer.0.attention.output.dense.weight"].T)
    np.testing.assert_array_equal(params["embeddings"]["LayerNorm"]["scale"],
                                  tensors[prefix + "embeddings.LayerNorm.weight"])


def test_bert_head_tensors_in_bare_checkpoint_are_unknown(tmp_path):
    tensors = _bert_tensors("", with_pooler=False)
    tensors["classifier.weight"] = np.zeros((3, 8), np.float32)
    (tmp_path / "config.json").write_text(json.dumps(BERT_CONFIG))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"unknown tensors.*: classifier\.weight \(3, 8\) in .*safetensors"):
        load_hf_bert(tmp_path, with_tokenizer=False)


def test_bert_missing_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(BERT_CONFIG))
    save_file(_bert_tensors("", True), str(tmp_path / "model.safetensors"))
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        load_hf_bert(tmp_path)
